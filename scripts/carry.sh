#!/bin/bash
# What a device call carries (docs/gpu.md): this checkout's travelling tree (the files git tracks or does not ignore,
# as far as they are on disk) plus at most one carried folder, 64 MiB in all. Sourced by scripts/device.sh and
# scripts/gpu_train_qwen15.sh, whose `prepare` packs what the lease reads, then `carry_pieces` leans the tree and cuts
# the pack into pieces that fit beside it; their lease joins the pieces with `carry_unpack`. Run directly to see or
# change the tree:
#   scripts/carry.sh room    the travelling tree's size and the room it leaves a carried piece
#   scripts/carry.sh lean    leave out of the working tree what no lease reads (the drafters' weights, the committed
#                            datasets, the benchmark records: 120 MB of 125): git sparse-checkout, nothing is lost
#   scripts/carry.sh full    bring them back (git sparse-checkout disable)
# The tool sends the checkout as it is on disk; whether it skips files a sparse checkout leaves out is not yet seen
# on a lent machine (docs/gpu.md).
CARRY_CALL_BYTES=$(( 64 * 1048576 ))
CARRY_MARGIN_BYTES=$(( 2 * 1048576 ))  # the call's own overhead
CARRY_MIN_PIECE_BYTES=$(( 8 * 1048576 ))  # below this a 1 GiB GGUF needs over 130 calls: refuse instead
CARRY_LEAN_OUT=('!/drafters/*/model.safetensors' '!/drafters/campaign/' '!/data/selfdistill/' '!/docs/benchmarks/')

carry_tree_bytes() {  # bytes of the travelling tree (files a sparse checkout leaves out are not on disk)
  local top
  top=$(git rev-parse --show-toplevel) || return 1
  (cd "$top" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null) \
    | awk '{s += $1} END {print s + 0}'
}

carry_room() {  # bytes one piece may have beside the travelling tree; refuses (status 1) where too few are left
  local tree room
  tree=$(carry_tree_bytes)
  room=$(( CARRY_CALL_BYTES - CARRY_MARGIN_BYTES - tree ))
  if [ "$room" -lt "$CARRY_MIN_PIECE_BYTES" ]; then
    echo "the travelling tree is $(( tree / 1048576 )) MiB: a 64 MiB device call has $(( room / 1048576 )) MiB left" \
      "for a piece, under the $(( CARRY_MIN_PIECE_BYTES / 1048576 )) MiB a lease needs. Fix: scripts/carry.sh lean" \
      "(the drafters' weights and datasets leave the working tree, not git; a prepare phase does it itself), and" \
      "scripts/carry.sh full after the lease." >&2
    return 1
  fi
  echo "$room"
}

carry_lean() {
  git sparse-checkout set --no-cone '/*' "${CARRY_LEAN_OUT[@]}"
}

carry_pieces() {  # carry_pieces SRC DEST: SRC as one tar stream in pieces, DEST/p0, p1, ... one per call, DEST/c last
  local src=$1 dest=$2 room parts i
  carry_lean || return 1
  echo "the working tree is lean now (scripts/carry.sh full brings the drafters' weights and datasets back)"
  room=$(carry_room) || return 1
  rm -rf "$dest" && mkdir -p "$dest/c" || return 1
  tar -C "$src" -cf - . | split -b "$room" -d -a 3 - "$dest/carry.tar.part" || return 1
  parts=("$dest"/carry.tar.part*)
  for i in $(seq 0 $(( ${#parts[@]} - 2 ))); do mkdir -p "$dest/p$i" && mv "${parts[$i]}" "$dest/p$i/"; done
  mv "${parts[-1]}" "$dest/c/"
  echo "${#parts[@]} pieces of at most $(( room / 1048576 )) MiB beside a $(( $(carry_tree_bytes) / 1048576 ))" \
    "MiB tree; device calls, back to back (a warm machine goes back after 30 s idle):"
  for d in $(ls -d "$dest"/p* 2>/dev/null | sort -V); do
    echo "  run(carry=[\"$d\"], command=\"mkdir -p /tmp/parts && cp $d/* /tmp/parts/\")"
  done
}

carry_unpack() {  # carry_unpack PARTS LAST WORK, there: the pieces (the earlier calls' in PARTS, the last one in
  # LAST) joined in name order and unpacked into WORK, once (WORK/carry.done)
  local parts=$1 last=$2 work=$3 f
  [ -f "$work/carry.done" ] && return 0
  mkdir -p "$work" || return 1
  for f in "$parts"/carry.tar.part* "$last"/carry.tar.part*; do [ -f "$f" ] && echo "${f##*/} $f"; done | sort \
    | cut -d" " -f2 | xargs cat | tar -C "$work" -x && touch "$work/carry.done"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  cd "$(dirname "$0")/.." || exit 1
  show_room() {
    local tree room
    tree=$(carry_tree_bytes)
    echo "travelling tree: $tree bytes ($(( tree / 1048576 )) MiB)"
    room=$(carry_room) && echo "room for a piece: $room bytes ($(( room / 1048576 )) MiB)"
  }
  case ${1:-} in
    room) show_room ;;
    lean) carry_lean && show_room ;;
    full) git sparse-checkout disable && show_room ;;
    *) sed -n '2,12p' "$0" | cut -c 3-; [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; exit $? ;;
  esac
fi
