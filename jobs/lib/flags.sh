# Sourced by the jobs scripts that wrap a program, with the user's flags as arguments: those in
# user_args, and the script's defaults in args, each only where the user gave no
# flag of that name: zero_estimate and zero_to_fp32 refuse a flag given twice, and zerotrain
# would take the last one, so the script's default never competes with the user's value.

user_args=("$@")
args=()

given() {  # given FLAG: whether the user's arguments hold FLAG
  local a
  for a in "${user_args[@]}"; do [[ $a == "$1" || $a == "$1="* ]] && return 0; done
  return 1
}
add() { given "$1" || args+=("$@"); }  # add FLAG VALUE...: the script's default for FLAG
