# Sourced by the jobs scripts that wrap a program: the user's flags (ZT_ARGS, then the script's
# arguments) in user_args, and the script's defaults in args, each only where the user gave no
# flag of that name (Boost.Program_options refuses a flag given twice).

read -r -a user_args <<<"${ZT_ARGS:-}"
user_args+=("$@")
args=()

given() {  # given FLAG: whether the user's arguments hold FLAG
  local a
  for a in "${user_args[@]}"; do [[ $a == "$1" || $a == "$1="* ]] && return 0; done
  return 1
}
add() { given "$1" || args+=("$@"); }  # add FLAG VALUE...: the script's default for FLAG
