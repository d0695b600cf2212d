# shellcheck shell=bash
# Sourced by the tests that run programs as another uid (second_uid.sh, ctl_live.sh,
# consumer_check.sh). The checkout may sit where that uid cannot reach it, such as root's 0700
# home on a fresh machine, so such a test runs copies instead: the programs and the libraries
# they load from outside the system's library directories (libnodecomm from the build tree;
# its RUNPATH names the build tree, and LD_LIBRARY_PATH comes first for a RUNPATH), in a
# directory of the test's own under /tmp. Nothing in the checkout is chmod'ed.
#   copy_for_other_uid DEST PROGRAM...   # DEST/bin/PROGRAM, DEST/lib/LIBRARY, all 0755/0644
# The caller creates DEST under a reachable parent (mktemp -d /tmp/...; chmod 0755), removes
# it in its EXIT trap, and runs DEST/bin/PROGRAM with LD_LIBRARY_PATH=DEST/lib.

copy_for_other_uid() {
  local dest=$1 prog lib
  shift
  mkdir -p "$dest/bin" "$dest/lib"
  for prog in "$@"; do
    install -m 0755 "$prog" "$dest/bin/" || return 1
    # ldd names each library the loader resolved; those in the system's directories are
    # readable by every uid already.
    while read -r lib; do
      case $lib in
        /lib/* | /lib64/* | /usr/lib/* | /usr/lib64/* | /usr/local/lib/*) ;;
        *) install -m 0644 "$lib" "$dest/lib/" || return 1 ;;
      esac
    done < <(ldd "$prog" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')
  done
  chmod 0755 "$dest" "$dest/bin" "$dest/lib"
}
