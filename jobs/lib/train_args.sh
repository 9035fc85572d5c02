# Sourced by train_mpirun.sh and train_slurm.sbatch: the zerotrain arguments both build from their
# ZT_* settings, and the checks on them that can be made before anything is launched.
#
# In: home, out (the output directory), say, the script's "$@" and ZT_ARGS, the ZT_* settings.
# Out: args and user_args (flags.sh), out (the user's --output_dir when given), resuming (the
# checkpoint the run continues from, if any). Exits 2 with one line on a missing config, model
# or data.

read -r -a zt_args <<<"${ZT_ARGS:-}"
source "$(dirname "${BASH_SOURCE[0]}")/flags.sh" "${zt_args[@]}" "$@"

for i in "${!user_args[@]}"; do  # the user's --output_dir is where the script looks too
  case ${user_args[i]} in
    --output_dir) out=${user_args[i + 1]:-} ;;
    --output_dir=*) out=${user_args[i]#--output_dir=} ;;
  esac
done

config=${ZT_CONFIG:-$home/configs/zero2.json}
model=${ZT_MODEL:-$home/configs/models/gpt2-demo.json}
train_data=${ZT_TRAIN_DATA:-${ZT_OUT:-$zt_out_default}/data/train_*.bin}
# The paths the script supplies are checked now, so that a wrong one is one line at once rather
# than an error from every rank.
given --deepspeed || [[ -f $config ]] || { say "ZT_CONFIG: no such file: $config"; exit 2; }
given --config_name || given --model_name_or_path || [[ -f $model ]] || { say "ZT_MODEL: no such file: $model"; exit 2; }
given --train_data || compgen -G "$train_data" >/dev/null ||
  { say "ZT_TRAIN_DATA: no file matches $train_data (run jobs/quickstart.sh, or zero_prepare_data)"; exit 2; }

add --deepspeed "$config"
given --model_name_or_path || add --config_name "$model"
add --train_data "$train_data"
add --output_dir "$out"
add --max_steps "${ZT_MAX_STEPS:-300}"
given --save_strategy || add --save_steps "${ZT_SAVE_STEPS:-100}"
add --disable_tqdm
[[ -n ${ZT_EVAL_DATA:-} ]] && add --eval_data "$ZT_EVAL_DATA"
# A run into a directory with a checkpoint continues from it, unless told to start over.
resuming=""
if [[ -e $out/latest ]] && ! given --overwrite_output_dir && ! given --resume_from_checkpoint; then
  add --resume_from_checkpoint auto
  resuming=$out/$(cat "$out/latest")
fi
