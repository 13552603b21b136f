#!/bin/sh
# Slurm prolog: gate this node before every job. Slurm drains a node whose prolog exits
# non-zero and requeues the job, so NO-GO (1) and could-not-assess (2) both keep the job off it.
#   slurm.conf:  Prolog=/etc/slurm/prolog.d/*   (this file, executable), PrologFlags=Alloc
#   ROCMCHECK            the rocmcheck command of the environment with the cluster's torch
#   ROCMCHECK_DIR        where node reports and verdicts go (a shared folder: `rocmcheck matrix DIR/reports`)
#   ROCMCHECK_EXPECT_GPUS  the GPU count every node of this partition must show
# Extra arguments are passed to `rocmcheck gate` (a narrower gate, a timeout).
ROCMCHECK=${ROCMCHECK:-rocmcheck}
DIR=${ROCMCHECK_DIR:-/var/log/rocmcheck}
node=$(hostname)
mkdir -p "$DIR/reports" "$DIR/verdicts" || exit 2
"$ROCMCHECK" gate --out-dir "$DIR/reports" --json - "$@" > "$DIR/verdicts/$node.json" 2>> "$DIR/verdicts/$node.log"
code=$?
[ "$code" -ne 0 ] && echo "rocmcheck: $node is not ready (exit $code): $DIR/verdicts/$node.json" >&2
exit "$code"
