#!/usr/bin/env bash
# Run by fresh_machine.sh inside a root where zerotrain was built and installed:
#   fresh_libraries.sh PREFIX
# Every shared library the programs in PREFIX/bin load (ldd) must come from an installed Debian
# package: those the programs name themselves (readelf's NEEDED) from a package of
# install_deps.sh's runtime list, and the rest from that list or the packages it depends on. One
# line per library ("lib SONAME PACKAGE"), a FAILED line per offence, non-zero exit on any.
set -uo pipefail
prefix=$1
runtime=$("$prefix/share/zerotrain/jobs/install_deps.sh" --list runtime) || { echo "FAILED: install_deps.sh --list runtime"; exit 1; }
# The runtime list and everything it depends on, recursively (Pre-Depends too).
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
            --no-enhances $runtime | grep -v '^ ' | sed 's/:amd64$//' | sort -u)

# owner PATH: the package that installed PATH. Debian 12 is usr-merged, and dpkg knows each file
# by the path its package shipped it under, /lib or /usr/lib.
owner() {
  local path candidates p
  path=$(readlink -f "$1")
  candidates=("$1" "$path")
  for p in "$1" "$path"; do
    case $p in
      /usr/lib/*) candidates+=("${p#/usr}") ;;
      /lib/*) candidates+=("/usr$p") ;;
    esac
  done
  for p in "${candidates[@]}"; do
    dpkg-query -S "$p" 2>/dev/null | head -1 | cut -d: -f1 && return 0
  done
  return 1
}

failed=0
declare -A seen
for program in "$prefix"/bin/*; do
  needed=$(readelf -d "$program" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  while read -r soname arrow path _; do
    [[ $arrow == "=>" ]] || continue  # the vDSO and the loader itself
    if [[ $path == "not" ]]; then
      echo "FAILED: $program: $soname not found"; failed=1; continue
    fi
    if [[ -z ${seen[$soname]:-} ]]; then  # each library's package looked up and shown once
      seen[$soname]=$(owner "$path") || { echo "FAILED: $soname ($path) belongs to no package"; failed=1; continue; }
      echo "lib $soname ${seen[$soname]}"
    fi
    package=${seen[$soname]}
    if grep -qx "$soname" <<<"$needed" && ! grep -qx "$package" <<<"$runtime"; then
      echo "FAILED: $(basename "$program") needs $soname from $package, which install_deps.sh's runtime list does not name"
      failed=1
    elif ! grep -qx "$package" <<<"$closure"; then
      echo "FAILED: $soname comes from $package, neither named by install_deps.sh nor a dependency of what it names"
      failed=1
    fi
  done < <(ldd "$program")
done
((${#seen[@]} > 0)) || { echo "FAILED: no library found (no programs in $prefix/bin?)"; exit 1; }
exit $failed
