#!/usr/bin/env bash
# Usage: check_install.sh BUILD_DIR [WITH_TORCH=1] — the installed toolkit, from
# `cmake --install` into a scratch prefix and from the .deb `cpack -G DEB`
# makes, unpacked into a scratch root: every program starts (--version),
# carries its man page and bash completion (naming every subcommand its
# --help lists), finds the CUDA runtime the package carries and, for
# orion-run, the interposer in lib/gpufleet/.
set -u
build=$1
with_torch=${2:-1}  # 0: a build without libtorch, whose package needs none
source "$(dirname "$0")/testlib.sh"
programs=(dz-compress dz-serve orion-profile orion-run sailor-plan sailor-run)

check_tree() {  # check_tree PREFIX: the installed files under PREFIX work
  local prefix=$1 p sub
  for p in "${programs[@]}"; do
    expect_rc 0 "$prefix/bin/$p" --version
    grep -q "^$p (gpufleet) " "$tmp/out" || fail "$prefix/bin/$p --version: $(head -n 1 "$tmp/out")"
    if ls "$prefix"/lib/gpufleet/libcudart.so.* >/dev/null 2>&1; then
      ldd "$prefix/bin/$p" | grep -q "libcudart.so.* => $prefix/bin/../lib/gpufleet/" ||
        fail "$p does not take the CUDA runtime the install carries: $(ldd "$prefix/bin/$p" | grep cudart)"
    fi
    local page="$prefix/share/man/man1/$p.1" completion="$prefix/share/bash-completion/completions/$p"
    [ -s "$page" ] && [ -s "$completion" ] || fail "$p: no man page or completion under $prefix/share"
    # Every subcommand: a section of the man page, and a completion of an empty word.
    local offered
    offered=$(bash -c "source '$completion'; COMP_WORDS=($p ''); COMP_CWORD=1; _${p//-/_}; echo \"\${COMPREPLY[*]}\"")
    for sub in $("$prefix/bin/$p" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && /^  [a-z]/ { print $1 }'); do
      local heading=".SH ${p^^} ${sub^^}"
      grep -qxF "${heading//-/\\-}" "$page" || fail "$p.1 has no section for '$sub' (${heading//-/\\-})"
      [[ " $offered " == *" $sub "* ]] || fail "the completion of $p does not offer '$sub': $offered"
    done
    if command -v man >/dev/null; then
      MANWIDTH=80 man -l "$page" >"$tmp/man" 2>"$tmp/man.err" || fail "man -l $page: $(cat "$tmp/man.err")"
      grep -q -- "--version" "$tmp/man" || fail "$p.1 renders without its options"
    fi
  done
  # A flag of a subcommand completes after the subcommand (dz-serve bench:
  # built with and without libtorch).
  offered=$(bash -c "source '$prefix/share/bash-completion/completions/dz-serve';
    COMP_WORDS=(dz-serve bench --js); COMP_CWORD=2; _dz_serve; echo \"\${COMPREPLY[*]}\"")
  [ "$offered" = "--json" ] || fail "completing 'dz-serve bench --js': '$offered'"
}

expect_rc 0 cmake --install "$build" --prefix "$tmp/prefix"
check_tree "$tmp/prefix"
# orion-run finds its interposer in the installed layout, and says where it looked when it is not there.
if [ -e "$tmp/prefix/lib/gpufleet/liborion_client.so" ]; then
  expect_rc 0 env -u ORION_CLIENT_LIBRARY "$tmp/prefix/bin/orion-run" -q exec --hp true
  mv "$tmp/prefix/lib/gpufleet/liborion_client.so" "$tmp/moved.so"
  expect_rc 2 env -u ORION_CLIENT_LIBRARY "$tmp/prefix/bin/orion-run" exec --hp true
  grep -q "liborion_client.so is neither beside the program .* nor in $tmp/prefix/lib/gpufleet" "$tmp/err" ||
    fail "a missing interposer: $(cat "$tmp/err")"
fi

# The Debian package, unpacked into a scratch root.
expect_rc 0 cpack -G DEB -B "$tmp/pkg" --config "$build/CPackConfig.cmake"
deb=$(ls "$tmp"/pkg/gpufleet_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || fail "cpack made no .deb: $(cat "$tmp/out")"
if [ "$with_torch" = 1 ]; then
  dpkg-deb -f "$deb" Depends | grep -q "libtorch" || fail "the package does not depend on libtorch: $(dpkg-deb -f "$deb" Depends)"
fi
expect_rc 0 dpkg-deb -x "$deb" "$tmp/root"
check_tree "$tmp/root/usr"
echo "install ok"
