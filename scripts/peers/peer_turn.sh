#!/usr/bin/env bash
# The peers' turn between two rounds of ours: a course program's --between-rounds command.
#   08_flash_v3 ... --rounds 5 --between-rounds "scripts/peers/peer_turn.sh DIR"
# After ours has timed round k of a problem, this hands the problem to the peer server listening on
# DIR (scripts/peers/torch_attention.py --serve DIR, started beforehand, DIR/request and DIR/reply
# made with mkfifo) and waits until the server has timed the same problem as its round k. The
# problem comes from the environment the program sets: COURSE_STAGE, COURSE_VARIANT, COURSE_DTYPE,
# COURSE_SHAPE, COURSE_ROUND. Exits non-zero when there is no server or it does not answer within
# PEER_TURN_TIMEOUT seconds (default 300); the program then stops calling it and says so.
set -u
dir=${1:?usage: peer_turn.sh DIR}
if [ ! -p "$dir/request" ] || [ ! -p "$dir/reply" ]; then
  echo "peer_turn.sh: no peer server at $dir (named pipes request and reply)" >&2
  exit 2
fi
line=$(printf '%s\t%s\t%s\t%s\t%s' "${COURSE_STAGE:-}" "${COURSE_VARIANT:-}" "${COURSE_DTYPE:-}" \
  "${COURSE_SHAPE:-}" "${COURSE_ROUND:-1}")
# Both ends of a named pipe wait for each other, so a server that died would hold us forever:
# timeout bounds the whole exchange.
timeout "${PEER_TURN_TIMEOUT:-300}" bash -c '
  printf "%s\n" "$2" >"$1/request" || exit 1
  IFS= read -r answer <"$1/reply" || exit 1
  [ "$answer" = done ]' peer_turn "$dir" "$line"
rc=$?
[ $rc -eq 0 ] || echo "peer_turn.sh: the peer server at $dir did not answer (status $rc)" >&2
exit $rc
