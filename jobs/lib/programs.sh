# Sourced by the jobs scripts: where zerotrain's programs and shared files are, the same from a
# source checkout and from an installed prefix (cmake --install, the .deb). Expects `home`: the
# checkout, or PREFIX/share/zerotrain, which holds configs/, jobs/, data/ and docs/ side by side.
#
#   zt_installed     1 when home is an installed PREFIX/share/zerotrain (it has no CMakeLists.txt)
#   zt_data          the folder of the shipped corpus (share/data in a checkout, data/ installed)
#   zt_out_default   where the scripts keep data and runs without ZT_OUT: the checkout's out/, or
#                    ./out where installed (a prefix is often not writable)
#   zt_program NAME  prints the path of program NAME, or returns 1:
#                      with ZT_BIN: $ZT_BIN/NAME, $ZT_BIN/src/NAME or $ZT_BIN/tools/NAME (a bin/
#                      folder or a build tree);
#                      in a checkout: its build/release/src or build/release/tools;
#                      installed: PREFIX/bin/NAME, else NAME on PATH.
#   zt_bin_hint      where zt_program looked, for errors: "under $ZT_BIN", "under HOME/build/release"
#                    or "beside HOME or on PATH"

if [[ -f $home/CMakeLists.txt ]]; then
  zt_installed=0
  zt_data=$home/share/data
  zt_out_default=$home/out
else
  zt_installed=1
  zt_data=$home/data
  zt_out_default=$PWD/out
fi

zt_program() {
  local name=$1 dir
  if [[ -n ${ZT_BIN:-} ]]; then
    for dir in "$ZT_BIN" "$ZT_BIN/src" "$ZT_BIN/tools"; do
      [[ -x $dir/$name && ! -d $dir/$name ]] && { echo "$dir/$name"; return 0; }
    done
    return 1
  fi
  if ((zt_installed == 0)); then
    for dir in "$home/build/release/src" "$home/build/release/tools"; do
      [[ -x $dir/$name ]] && { echo "$dir/$name"; return 0; }
    done
    return 1
  fi
  dir=$(cd "$home/../../bin" 2>/dev/null && pwd) && [[ -x $dir/$name ]] && { echo "$dir/$name"; return 0; }
  command -v "$name"
}

if [[ -n ${ZT_BIN:-} ]]; then
  zt_bin_hint="under $ZT_BIN"
elif ((zt_installed == 0)); then
  zt_bin_hint="under $home/build/release"
else
  zt_bin_hint="beside $home or on PATH"
fi
