#!/usr/bin/env bash
# The data path's bytes within and across nodes (issue 34): zerotrain's measured traffic_bytes
# (metrics.jsonl, each rank's collectives counted as the ring model of comm/traffic.h moves them, summed
# over ranks) equal zero_estimate's traffic_bytes_per_step for the same run, byte for byte: 4 ranks as
# 2 nodes of 2 (ZT_SHM_COLLECTIVES=1 ZT_SHM_NODE_SIZE=2: shared memory in each node, MPI between),
# stages 0-3, gradient accumulation 1 and 2, bf16, reduce_scatter and allgather_partitions false;
# one node through MPI and through shared memory; a stage 3 whose live-parameter limit makes the
# estimate a bound; ZeRO++'s parts and MiCS (with hierarchical gathers, at 8 ranks too) likewise.
# The end event, the trainer's last lines and zero_estimate's text say the same figures.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ESTIMATE="$ZT_BIN_DIR/tools/zero_estimate"
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
# Odd widths: the flat buffer is padded (stages 0-1 reduce the padding, 2-3 do not).
MODEL=$WORK/model.json
echo '{"model_type": "gpt2", "n_layer": 2, "n_embd": 72, "n_head": 4, "n_positions": 64, "vocab_size": 250}' >"$MODEL"
sed 's/"stage3_max_live_parameters": 1e9/"stage3_max_live_parameters": 70000/' "$ZT_SOURCE_DIR/configs/zero3.json" \
  >"$WORK/zero3_live.json"
# DeepSpeed's reduce_scatter: false (gradients all-reduced) and allgather_partitions: false
# (updated partitions broadcast from each rank).
sed 's/"stage": 1,/"stage": 1, "reduce_scatter": false,/' "$ZT_SOURCE_DIR/configs/zero1.json" >"$WORK/zero1_ar.json"
sed 's/"stage": 2,/"stage": 2, "allgather_partitions": false,/' "$ZT_SOURCE_DIR/configs/zero2.json" \
  >"$WORK/zero2_bcast.json"
# ZeRO++ qwZ: int8 packets in stage 3's all-gathers (zero/quantized_gather.h), with every unit kept
# gathered and with the live limit (a gather per use).
sed 's/"stage": 3,/"stage": 3, "zero_quantized_weights": true,/' "$ZT_SOURCE_DIR/configs/zero3.json" \
  >"$WORK/zero3_qwz.json"
sed 's/"stage": 3,/"stage": 3, "zero_quantized_weights": true,/' "$WORK/zero3_live.json" >"$WORK/zero3_qwz_live.json"
# ZeRO++ hpZ in groups of a (simulated) node's 2 ranks: with units released after use, every
# gather after a unit's first in the step stays inside the node; alone and with qwZ.
sed 's/"stage3_max_reuse_distance": 1e9/"stage3_max_reuse_distance": 0/
     s/"stage": 3,/"stage": 3, "zero_hpz_partition_size": 2,/' \
  "$ZT_SOURCE_DIR/configs/zero3.json" >"$WORK/zero3_hpz.json"
sed 's/"stage": 3,/"stage": 3, "zero_quantized_weights": true,/' "$WORK/zero3_hpz.json" >"$WORK/zero3_hpz_qwz.json"
sed 's/"stage3_max_reuse_distance": 1e9/"stage3_max_reuse_distance": 0/' "$ZT_SOURCE_DIR/configs/zero3.json" \
  >"$WORK/zero3_release.json"
# ZeRO++ qgZ: a reduce-scatter inside each node, int4 packets across nodes (an all_to_all); and
# all three parts together.
sed 's/"stage": 3,/"stage": 3, "zero_quantized_gradients": true,/' "$ZT_SOURCE_DIR/configs/zero3.json" \
  >"$WORK/zero3_qgz.json"
sed 's/"stage": 3,/"stage": 3, "zero_quantized_gradients": true,/' "$WORK/zero3_hpz_qwz.json" >"$WORK/zero3_zeropp.json"
# MiCS in shard groups of a (simulated) node: gathers and reduce-scatters inside it, the gradient
# partition all-reduced across the groups at the step.
sed 's/"stage": 3,/"stage": 3, "mics_shard_size": 2,/' "$ZT_SOURCE_DIR/configs/zero3.json" >"$WORK/zero3_mics.json"
# MiCS's hierarchical gathers, shard groups of 4 ranks on 2 nodes: the rails' gathers across the
# nodes, the nodes' inside (one shard group of all 4 ranks; at 8 ranks two, replicas of each other).
sed 's/"stage": 3,/"stage": 3, "mics_shard_size": 4, "mics_hierarchical_params_gather": true,/' \
  "$ZT_SOURCE_DIR/configs/zero3.json" >"$WORK/zero3_mics_hier.json"

# case NAME NP CONFIG NODES SHM ARGS...: a 3-step run and its estimate; NODES simulated nodes
# (ZT_SHM_NODE_SIZE = NP / NODES) when SHM is 1.
case_run() {
  local name=$1 np=$2 config=$3 nodes=$4 shm=$5
  shift 5
  local out=$WORK/$name env=(-x OMP_NUM_THREADS) est=()
  if [[ $shm == 1 ]]; then
    env+=(-x ZT_SHM_COLLECTIVES=1)
    est+=(--shm_collectives)
    [[ $nodes -gt 1 ]] && env+=(-x ZT_SHM_NODE_SIZE=$((np / nodes)))
  fi
  OMP_NUM_THREADS=1 timeout 300 mpirun -np "$np" --oversubscribe "${env[@]}" "$ZEROTRAIN" --deepspeed "$config" \
    --config_name "$MODEL" --train_data "$DATA/train_*.bin" --output_dir "$out" --block_size 32 --max_steps 3 \
    --per_device_train_batch_size 1 --save_strategy no --disable_tqdm "$@" >"$out.log" 2>&1 ||
    { fail "$name: run failed: $(grep -m1 'error' "$out.log")"; return; }
  "$ESTIMATE" --config_name "$MODEL" --deepspeed "$config" --num_gpus_per_node $((np / nodes)) --num_nodes "$nodes" \
    --per_device_train_batch_size 1 --block_size 32 "${est[@]}" "$@" --json \
    >"$out.estimate.json" 2>"$out.estimate.log" ||
    { fail "$name: zero_estimate failed: $(tail -1 "$out.estimate.log")"; return; }
  "$ESTIMATE" --config_name "$MODEL" --deepspeed "$config" --num_gpus_per_node $((np / nodes)) --num_nodes "$nodes" \
    --per_device_train_batch_size 1 --block_size 32 "${est[@]}" "$@" >"$out.estimate.txt" 2>&1
  /usr/bin/python3 - "$out" "$name" <<'PY' && pass "$name: measured as estimated" || fail "$name"
import json, sys
out, name = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(f"{out}/metrics.jsonl")]
steps = [l for l in lines if l["event"] == "step"]
end = [l for l in lines if l["event"] == "end"][0]
est = json.load(open(f"{out}.estimate.json"))["traffic_bytes_per_step"]
measured = steps[-1]["traffic_bytes"]  # steady state: step 1 also records stage 3's trace
bound = "every use gathered" in est["caveat"]
# hpZ: a unit's first gather a step crosses nodes, the bound's extra ones stay inside them.
inter_exact = "hpz" in name
print(name, "measured", measured["intra_node"], measured["inter_node"], "estimated", est["intra_node"],
      est["inter_node"], est["caveat"])
for kind, m in measured["by_collective"].items():
    e = est["by_collective"][kind]
    for link in ("intra_node", "inter_node"):
        if bound and kind == "all_gather" and not (inter_exact and link == "inter_node"):
            assert m[link] <= e[link], (kind, link, m[link], e[link])
        else:
            assert m[link] == e[link], (kind, link, m[link], e[link])
assert end["traffic_bytes_last_step"] == measured and "traffic_bytes_mean_per_step" in end, end
assert end["nodes"]["count"] == est["nodes"]["count"], end
log = open(f"{out}.log").read()
words = [l for l in log.splitlines() if "communication in the last step" in l]
assert words and ("across nodes" in words[0]), words
text = open(f"{out}.estimate.txt").read()
assert "communication a step" in text, text[-400:]
PY
}

case_run hier_s0 4 "$ZT_SOURCE_DIR/configs/zero0.json" 2 1
case_run hier_s1 4 "$ZT_SOURCE_DIR/configs/zero1.json" 2 1
case_run hier_s1_allreduce 4 "$WORK/zero1_ar.json" 2 1
case_run hier_s2_broadcast 4 "$WORK/zero2_bcast.json" 2 1
case_run hier_s2_acc2 4 "$ZT_SOURCE_DIR/configs/zero2.json" 2 1 --gradient_accumulation_steps 2
case_run hier_s3 4 "$ZT_SOURCE_DIR/configs/zero3.json" 2 1
case_run hier_s3_acc2_bf16 4 "$ZT_SOURCE_DIR/configs/zero3.json" 2 1 --gradient_accumulation_steps 2 --bf16
case_run mpi_one_node_s3 4 "$ZT_SOURCE_DIR/configs/zero3.json" 1 0 --gradient_accumulation_steps 2
case_run shm_one_node_s2 2 "$ZT_SOURCE_DIR/configs/zero2.json" 1 1
case_run hier_s3_live_limit 4 "$WORK/zero3_live.json" 2 1 --gradient_accumulation_steps 2
case_run hier_s3_qwz_bf16 4 "$WORK/zero3_qwz.json" 2 1 --bf16
case_run hier_s3_qwz_live_limit 4 "$WORK/zero3_qwz_live.json" 2 1 --gradient_accumulation_steps 2
case_run mpi_one_node_s3_qwz 4 "$WORK/zero3_qwz.json" 1 0
case_run hier_s3_release 4 "$WORK/zero3_release.json" 2 1 --gradient_accumulation_steps 2
case_run hier_s3_hpz 4 "$WORK/zero3_hpz.json" 2 1 --gradient_accumulation_steps 2
case_run hier_s3_hpz_qwz_bf16 4 "$WORK/zero3_hpz_qwz.json" 2 1 --bf16
case_run mpi_one_node_s3_hpz 4 "$WORK/zero3_hpz.json" 1 0
case_run hier_s3_qgz 4 "$WORK/zero3_qgz.json" 2 1 --gradient_accumulation_steps 2
case_run hier_s3_qgz_bf16 4 "$WORK/zero3_qgz.json" 2 1 --bf16
case_run hier_s3_zeropp_hpz_bf16 4 "$WORK/zero3_zeropp.json" 2 1 --bf16 --gradient_accumulation_steps 2
case_run mpi_one_node_s3_qgz 4 "$WORK/zero3_qgz.json" 1 0
case_run hier_s3_mics 4 "$WORK/zero3_mics.json" 2 1 --gradient_accumulation_steps 2
case_run hier_s3_mics_bf16 4 "$WORK/zero3_mics.json" 2 1 --bf16
case_run hier_s3_mics_hierarchical 4 "$WORK/zero3_mics_hier.json" 2 1 --gradient_accumulation_steps 2
case_run hier8_s3_mics_hierarchical_bf16 8 "$WORK/zero3_mics_hier.json" 4 1 --bf16

# Two nodes of 2: HierComm sends (N - 1) = 1 payload across nodes, a flat ring's two edges out of
# the nodes 2 x 3/4 of it (and fewer bytes inside): ZeRO-3's estimate both ways.
"$ESTIMATE" --config_name "$MODEL" --stage 3 --num_gpus_per_node 2 --num_nodes 2 --block_size 32 --json \
  >"$WORK/ring.json" 2>&1
"$ESTIMATE" --config_name "$MODEL" --stage 3 --num_gpus_per_node 2 --num_nodes 2 --block_size 32 --json \
  --shm_collectives >"$WORK/hier.json" 2>&1
/usr/bin/python3 - "$WORK/ring.json" "$WORK/hier.json" <<'PY' && pass "hierarchical: 2/3 of a ring" || fail "hier"
import json, sys
ring, hier = (json.load(open(p))["traffic_bytes_per_step"] for p in sys.argv[1:3])
print("across nodes: ring", ring["inter_node"], "hierarchical", hier["inter_node"])
assert ring["collectives"] == "ring" and hier["collectives"].startswith("shared memory"), (ring, hier)
assert hier["inter_node"] * 3 == ring["inter_node"] * 2, (ring["inter_node"], hier["inter_node"])
PY
# The same over a flat ring (MPI, NCCL) with MiCS's hierarchical gathers: each unit's all-gather
# crosses the nodes in the rails, (N - 1) of it, against the ring's 3/4 x 2; inside the nodes more.
"$ESTIMATE" --config_name "$MODEL" --deepspeed "$WORK/zero3_mics_hier.json" --num_gpus_per_node 2 --num_nodes 2 \
  --block_size 32 --json >"$WORK/ring_mics_hier.json" 2>&1
/usr/bin/python3 - "$WORK/ring.json" "$WORK/ring_mics_hier.json" <<'PY' &&
import json, sys
ring, hier = (json.load(open(p))["traffic_bytes_per_step"]["by_collective"]["all_gather"] for p in sys.argv[1:3])
print("all-gathers across nodes: ring", ring["inter_node"], "hierarchical", hier["inter_node"])
assert hier["inter_node"] * 3 == ring["inter_node"] * 2, (ring, hier)
assert hier["intra_node"] > ring["intra_node"], (ring, hier)
PY
  pass "MiCS hierarchical gathers: 2/3 of a ring's all-gather bytes across nodes" || fail "mics hierarchical ring"
finish
