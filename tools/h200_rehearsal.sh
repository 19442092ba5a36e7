#!/usr/bin/env bash
# tools/h200_rehearsal.sh [CMD ...] — run CMD (default: tests/gpu/run.sh build) from the repository
# root in a private mount namespace where the headers and link-time names the lent H200 machine
# lacks are hidden: readline, ncurses, cmocka, stb, cblas/OpenBLAS headers, and the unversioned
# .so / .a names of OpenBLAS, readline, ncurses, tinfo, cmocka (the versioned .so.N stay, as there).
#
# Why: a device lease is minutes long and the first thing its script does is build. A build that
# only works because this machine has a header the device lacks would cost the whole lease; this
# shows it here first. Needs root and a kernel that allows `unshare -m` with overlayfs (the
# development container does); nothing outside the namespace changes — the hidden files are
# whiteouts in overlay layers under a temp dir, removed at the end.
#
#   tools/h200_rehearsal.sh                          # the device script's build and links
#   tools/h200_rehearsal.sh build/float-headless/dmsh -b run.dm
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "h200_rehearsal: needs root (unshare -m, overlay mounts)" >&2; exit 2; }
[ $# -gt 0 ] || set -- tests/gpu/run.sh build
OV=$(mktemp -d /tmp/h200-rehearsal.XXXXXX)
trap 'rm -rf "$OV"' EXIT
cat > "$OV/inner.sh" <<'EOS'
set -euo pipefail
lib=/usr/lib/$(gcc -print-multiarch)
inc_arch=/usr/include/$(gcc -print-multiarch)
i=0
for d in /usr/include "$inc_arch" "$lib"; do
    [ -d "$d" ] || continue
    i=$((i + 1)); mkdir -p "$OV/$i/up" "$OV/$i/wk"
    mount -t overlay overlay -o "lowerdir=$d,upperdir=$OV/$i/up,workdir=$OV/$i/wk" "$d"
done
( cd /usr/include && rm -rf readline ncursesw ncurses*.h curses*.h cursesapp.h cursesf.h cursesm.h cursesp.h \
      cursesw.h eti.h form.h menu.h panel.h term.h termcap.h unctrl.h cmocka*.h stb cblas*.h openblas* )
( cd "$inc_arch" 2>/dev/null && rm -rf cblas* openblas* lapack* ) || true
( cd "$lib" && rm -f libopenblas.so libopenblas.a openblas-pthread/libopenblas.so openblas-pthread/libopenblas.a \
      openblas-pthread/libblas.so openblas-pthread/liblapack.so libblas.so libblas.a liblapack.so \
      libreadline.so libreadline.a libhistory.so libncursesw.so libncurses.so libtinfo.so libcmocka.so \
      libform*.so libmenu*.so libpanel*.so )
echo "h200_rehearsal: hidden: readline, ncurses, cmocka, stb and cblas headers; unversioned OpenBLAS, readline, ncurses, cmocka libraries" >&2
"$@"
EOS
OV=$OV unshare -m bash "$OV/inner.sh" "$@"
