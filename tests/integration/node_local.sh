#!/usr/bin/env bash
# checkpoint.use_node_local_storage on two simulated nodes (ctest/fake_node_rsh.sh: each node has
# its own /mnt-style local disk): each node holds only its ranks' shards, its own manifest and
# `latest`; a resume on the same layout is bit-exact, also when the nodes' `latest` disagree after
# a crash; a resume that needs another node's shard is one clear error, exit 2.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v unshare >/dev/null || { echo "unshare (util-linux) is required"; exit 1; }
export ZT_FAKE_NODE_ROOT=$WORK/nodes ZT_FAKE_NODE_MOUNT=/mnt/zt_nodelocal
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
sed 's/"WarmupDecayLR"/"WarmupLR"/; /total_num_steps/d; s/"warmup_type": "linear",/"warmup_type": "linear"/; s/^{$/{\n  "checkpoint": {"use_node_local_storage": true},/' \
  "$ZT_SOURCE_DIR/configs/zero2.json" >"$WORK/z2.json"

# on_nodes OUT ARGS...: 4 ranks, 2 on each of the simulated nodes n1 and n2.
on_nodes() {
  local out=$1
  shift
  OMPI_MCA_plm_rsh_agent="$ZT_SOURCE_DIR/ctest/fake_node_rsh.sh" OMP_NUM_THREADS=1 timeout 300 \
    mpirun -H n1:2,n2:2 -np 4 --oversubscribe -x OMP_NUM_THREADS -x OMPI_MCA_btl_tcp_if_include=lo \
    --mca btl_tcp_if_include lo "$ZEROTRAIN" --deepspeed "$WORK/z2.json" \
    --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --train_data "$DATA/train_*.bin" \
    --output_dir "$ZT_FAKE_NODE_MOUNT/$out" --block_size 32 --per_device_train_batch_size 1 --learning_rate 2e-3 \
    --warmup_steps 2 --seed 5 --disable_tqdm "$@"
}
last_loss() {  # the last step's loss in a node's metrics.jsonl
  /usr/bin/python3 -c "import json,sys; print([l['loss'] for l in map(json.loads, open(sys.argv[1])) if l['event'] == 'step'][-1])" "$1"
}

on_nodes full --max_steps 8 2>"$WORK/full.log" || fail "uninterrupted run: $(tail -3 "$WORK/full.log")"
on_nodes run --max_steps 6 --save_steps 3 2>"$WORK/run.log" || fail "node-local save: $(tail -3 "$WORK/run.log")"
n1=$ZT_FAKE_NODE_ROOT/n1/run n2=$ZT_FAKE_NODE_ROOT/n2/run
files() { (cd "$1" && ls | tr '\n' ' '); }
if [[ "$(files "$n1/global_step6")" == "manifest.json model_states.h5 zero_rank_0_optim_states.h5 zero_rank_1_optim_states.h5 " &&
      "$(files "$n2/global_step6")" == "manifest.json zero_rank_2_optim_states.h5 zero_rank_3_optim_states.h5 " &&
      "$(cat "$n1/latest")" == global_step6 && "$(cat "$n2/latest")" == global_step6 ]]; then
  pass "each node holds its own ranks' shards, manifest and latest"
else
  fail "node files: n1 [$(files "$n1/global_step6" 2>&1)] n2 [$(files "$n2/global_step6" 2>&1)]"
fi
[[ -f "$n1/metrics.jsonl" && ! -e "$n2/metrics.jsonl" ]] && pass "metrics.jsonl only on rank 0's node" || fail "metrics placement"

on_nodes run --max_steps 8 --resume_from_checkpoint auto 2>"$WORK/resume.log"
if [[ "$(last_loss "$n1/metrics.jsonl")" == "$(last_loss "$ZT_FAKE_NODE_ROOT/n1/full/metrics.jsonl")" ]] &&
   grep -q "resumed from $ZT_FAKE_NODE_MOUNT/run/global_step6" "$WORK/resume.log"; then
  pass "resume from node-local shards is bit-exact"
else
  fail "node-local resume: $(tail -3 "$WORK/resume.log")"
fi

# A crash between the nodes' `latest` updates: n2 still names step 3. All agree on step 3.
echo global_step3 >"$n2/latest"
on_nodes run --max_steps 8 --resume_from_checkpoint auto 2>"$WORK/resume3.log"
if grep -q "resumed from $ZT_FAKE_NODE_MOUNT/run/global_step3" "$WORK/resume3.log" &&
   [[ "$(last_loss "$n1/metrics.jsonl")" == "$(last_loss "$ZT_FAKE_NODE_ROOT/n1/full/metrics.jsonl")" ]]; then
  pass "nodes that disagree on latest resume from the newest step they all hold"
else
  fail "latest disagreement: $(tail -3 "$WORK/resume3.log")"
fi

# Two ranks on one node need rank 2 and 3's shards, which live on n2 only.
expect_usage_error_mpi "resume without the other node's shards" "zero_rank_[0-9]_optim_states.h5: not on this node" \
  env OMP_NUM_THREADS=1 timeout 120 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$ZEROTRAIN" \
  --deepspeed "$WORK/z2.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --train_data "$DATA/train_*.bin" --output_dir "$n1" --block_size 32 --per_device_train_batch_size 2 \
  --max_steps 8 --resume_from_checkpoint "$n1/global_step6" --disable_tqdm
finish
