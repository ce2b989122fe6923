#!/usr/bin/env bash
# Packs a CUDA build (default build/gpu) and the shared libraries it needs that a bare GPU machine
# lacks (Open MPI with its components and help files, liburing, OpenBLAS, ...) into
# .devbundle/bundle.tar.xz, so the tests can run on a lent GPU machine that has the CUDA toolkit
# but none of our Debian packages and no network. CUDA's own libraries (cudart, cuBLAS, NCCL) are
# too large to carry and are taken from that machine (gpu_check.sh finds them).
# Configure the build with -DTIERZERO_NATIVE=OFF: that machine's CPU may lack this one's ISA.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/gpu}
out=.devbundle
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# (git rev-parse: in a worktree .git is a file naming the real git directory.)
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devbundle/' "$exclude" 2>/dev/null || echo '/.devbundle/' >>"$exclude"
mkdir -p "$out" "$stage/root"

# The build tree without objects: test binaries, CTest files, generated test lists.
(cd "$build" && find . -type f ! -name '*.o' ! -name '*.a' ! -name '.ninja_*' \
  ! -path './CMakeFiles/*' ! -name 'compile_commands.json' -print0) |
  tar -C "$build" --null -T - -cf "$stage/build.tar"

# Open MPI's runtime as installed here (same paths there, so no relocation is needed).
ompi_dirs=(/usr/lib/x86_64-linux-gnu/openmpi /usr/share/openmpi /etc/openmpi
           /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/pmix /usr/lib/x86_64-linux-gnu/hwloc)
# (tar, not cp --parents: the paths may pass through symbolic links such as /lib.)
copy_paths() { tar -C / -chf - "$@" 2>/dev/null | tar -C "$stage/root" -xf -; }
for d in "${ompi_dirs[@]}"; do [ -e "$d" ] && tar -C / -cf - "${d#/}" | tar -C "$stage/root" -xf -; done
mkdir -p "$stage/root/usr/bin"
for b in orterun orted ompi_info; do cp "$(readlink -f /usr/bin/$b)" "$stage/root/usr/bin/$b"; done
# fio: `tierzero bench io` (and the benches built on it) measure the drive's ceiling with it.
[ -x /usr/bin/fio ] && cp /usr/bin/fio "$stage/root/usr/bin/fio"

# Every shared library those need, except glibc's and CUDA's (taken from that machine).
{
  find "$build" -type f -perm -u+x ! -name '*.sh' ! -name '*.py'
  find /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 -name '*.so*' -type f
  readlink -f /usr/bin/orterun /usr/bin/orted
  [ -x /usr/bin/fio ] && echo /usr/bin/fio
} | while read -r f; do ldd "$f" 2>/dev/null; done | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[.-]' |
  while read -r lib; do
    lib=${lib/#\/lib\//\/usr\/lib\/}  # /lib is a link to usr/lib: name the real directory
    copy_paths "${lib#/}"
  done
tar -C "$stage" -cf "$stage/all.tar" build.tar root
xz -T2 -6 -c "$stage/all.tar" >"$out/bundle.tar.xz"
ls -la "$out/bundle.tar.xz"
