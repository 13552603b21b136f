#!/bin/sh
# Slurm prolog: `rocmcheck gate` on this node before each job; every job's verdict is kept, and a
# node that fails is drained with a reason that names what failed. docs/recipes/slurm.md says
# what Slurm does with each outcome; `make slurm-test` runs this file in a one-node Slurm.
#
#   slurm.conf:  Prolog=/etc/slurm/prolog.d/*      (this file, executable; owned by root)
#                PrologFlags=Alloc                 (at allocation, on every node of the job)
#                PrologEpilogTimeout=120           (keep ROCMCHECK_DEADLINE 10 s or more below it)
#                SchedulerParameters=nohold_on_prolog_fail   (requeue a batch job without holding it)
#
# slurmd starts a prolog with SLURM_* variables only (no PATH) and no arguments, so the settings
# are set here: edit the defaults below, or point Prolog at a wrapper that exports them and
# execs this file.
#   ROCMCHECK              absolute path of the rocmcheck of the environment with the cluster's torch
#                          (unset: the first of /opt/rocmcheck/bin, /usr/local/bin, /usr/bin that has one)
#   ROCMCHECK_DIR          where verdicts and reports go (a shared folder: `rocmcheck matrix DIR/reports`)
#   ROCMCHECK_EXPECT_GPUS  the GPU count every node of this partition must show
#   ROCMCHECK_DEADLINE     the whole gate's budget in seconds: it ends UNKNOWN with its verdict written
#   ROCMCHECK_ON_UNKNOWN   drain (default) or run: what a gate that could not assess (exit 2) does
#   ROCMCHECK_ARGS         more `rocmcheck gate` options, split on spaces (a narrower gate, --timeout)
#   ROCMCHECK_DRAIN        scontrol (default): drain the node itself; no: only say the reason on stdout
#                          (docs/recipes/rocmcheck.nhc runs this file so, and NHC drains)
#   SCONTROL               absolute path of scontrol (unset: found in /usr/bin, /usr/local/bin, /opt/slurm/bin)
#
# Files, per node (named by $SLURMD_NODENAME): DIR/verdicts/NODE/TIME-jobID-PID.json, one per run,
# written to a hidden temporary file and renamed, so a prolog killed half-way never leaves a
# partial verdict nor touches an earlier one; DIR/verdicts/NODE/latest.json links the newest;
# DIR/verdicts/NODE/prolog.log holds the gate's lines and this script's. Exit: 0 the job runs
# (GO, or UNKNOWN under ROCMCHECK_ON_UNKNOWN=run), 1 NO-GO, 2 UNKNOWN: the node is drained.
ROCMCHECK=${ROCMCHECK:-}
ROCMCHECK_DIR=${ROCMCHECK_DIR:-/var/log/rocmcheck}
ROCMCHECK_EXPECT_GPUS=${ROCMCHECK_EXPECT_GPUS:-}
ROCMCHECK_DEADLINE=${ROCMCHECK_DEADLINE:-110}
ROCMCHECK_ON_UNKNOWN=${ROCMCHECK_ON_UNKNOWN:-drain}
ROCMCHECK_ARGS=${ROCMCHECK_ARGS:-}
ROCMCHECK_DRAIN=${ROCMCHECK_DRAIN:-scontrol}
SCONTROL=${SCONTROL:-}

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin  # for the tools rocmcheck reads the GPUs with
export PATH

# A name safe in a file name: anything but letters, digits, '.', '_' and '-' becomes '_'.
safe() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-64; }
node=$(safe "${SLURMD_NODENAME:-$(uname -n)}")
job=$(safe "${SLURM_JOB_ID:-}")
label=${job:+job$job}
here="$ROCMCHECK_DIR/verdicts/$node"
log="$here/prolog.log"

# One line for the log (stderr when the log cannot be written: slurmd's own log at debug level).
say() {
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) rocmcheck-prolog ${label:-nojob}: $*"
    { printf '%s\n' "$line" >> "$log"; } 2>/dev/null || printf '%s\n' "$line" >&2
}

# Drain this node with REASON (Slurm keeps a reason a prolog set over its own "Prolog error"),
# and say REASON on stdout, where NHC's check reads it (slurmd discards a prolog's stdout).
drain() {
    reason=$(printf '%.250s' "$1")
    printf '%s\n' "$reason"
    if [ "$ROCMCHECK_DRAIN" = no ]; then
        say "$reason"
    elif [ -z "$SLURMD_NODENAME" ]; then
        say "not run by slurmd (no SLURMD_NODENAME): would drain with reason: $reason"
    elif [ -z "$SCONTROL" ]; then
        say "no scontrol found (set SCONTROL): Slurm drains the node as 'Prolog error'; reason would be: $reason"
    elif ! out=$("$SCONTROL" update nodename="$SLURMD_NODENAME" state=drain reason="$reason" 2>&1); then
        say "scontrol could not set the reason ($out): Slurm drains the node as 'Prolog error'; reason: $reason"
    else
        say "drained $SLURMD_NODENAME: $reason"
    fi
}

# The verdict of a gate that gave none (it could not be started, or died): UNKNOWN, same shape.
unknown_verdict() {
    why=$(printf '%s' "$1" | tr -c ' -~' '?' | tr -d "\"'\\\\\`\$")
    printf '{\n  "schema": "rocmcheck-node-verdict",\n  "schema_version": "1.0",\n  "node": "%s",\n' "$node"
    jid=null
    [ -n "$job" ] && jid="\"$job\""
    printf '  "job_id": %s,\n  "status": "UNKNOWN",\n  "exit_code": 2,\n' "$jid"
    printf '  "reason": "rocmcheck UNKNOWN: %.231s",\n  "error": "%s",\n  "failing": []\n}\n' "$why" "$why"
}

for found in "$SCONTROL" /usr/bin/scontrol /usr/local/bin/scontrol /opt/slurm/bin/scontrol; do
    [ -n "$found" ] && [ -x "$found" ] && { SCONTROL=$found; break; }
done
[ -x "$SCONTROL" ] || SCONTROL=

problem=
if [ -z "$ROCMCHECK" ]; then
    for found in /opt/rocmcheck/bin/rocmcheck /usr/local/bin/rocmcheck /usr/bin/rocmcheck; do
        [ -x "$found" ] && { ROCMCHECK=$found; break; }
    done
    [ -n "$ROCMCHECK" ] || problem="no rocmcheck in /opt/rocmcheck/bin, /usr/local/bin or /usr/bin: set ROCMCHECK in $0"
fi
case $ROCMCHECK in
    /*) [ -z "$problem" ] && [ ! -x "$ROCMCHECK" ] && problem="ROCMCHECK=$ROCMCHECK is not an executable file" ;;
    *) [ -z "$problem" ] && problem="ROCMCHECK=$ROCMCHECK is not an absolute path (slurmd starts a prolog with no PATH)" ;;
esac
case $ROCMCHECK_ON_UNKNOWN in
    drain|run) ;;
    *) problem="ROCMCHECK_ON_UNKNOWN=$ROCMCHECK_ON_UNKNOWN must be drain or run"; ROCMCHECK_ON_UNKNOWN=drain ;;
esac

stamp=$(date -u +%Y%m%dT%H%M%SZ)
name="$stamp-${label:-nojob}-$$.json"
tmp="$here/.$name.tmp"
if ! mkdir -p "$here" "$ROCMCHECK_DIR/reports" 2>/dev/null || ! : > "$tmp" 2>/dev/null; then
    problem="cannot write verdicts to $here"
    tmp=
fi
find "$here" -name '.*.json.tmp' -mmin +60 -exec rm -f {} + 2>/dev/null  # left by prologs Slurm killed

if [ -n "$problem" ]; then
    code=2
    say "could not assess: $problem"
    [ -n "$tmp" ] && unknown_verdict "$problem" > "$tmp"
else
    set -f  # ROCMCHECK_ARGS is split on spaces, as documented, and never globbed ('transfer*' stays)
    # shellcheck disable=SC2086
    "$ROCMCHECK" gate --deadline "$ROCMCHECK_DEADLINE" --out-dir "$ROCMCHECK_DIR/reports" --json - \
        ${ROCMCHECK_EXPECT_GPUS:+--expect-gpus "$ROCMCHECK_EXPECT_GPUS"} $ROCMCHECK_ARGS > "$tmp" 2>> "$log"
    code=$?
    if [ "$code" -gt 2 ] || ! grep -q '^  "status": ' "$tmp"; then  # not started (126, 127), or died
        say "rocmcheck gave no verdict (exit $code): $ROCMCHECK"
        unknown_verdict "rocmcheck exited $code without a verdict" > "$tmp"
        code=2
    fi
fi

verdict=
if [ -n "$tmp" ]; then
    if mv -f "$tmp" "$here/$name"; then
        verdict="$here/$name"
        { ln -sf "$name" "$here/.latest.$$" && mv -f "$here/.latest.$$" "$here/latest.json"; } 2>/dev/null ||
            say "could not point $here/latest.json at $name"
    else
        say "could not keep the verdict as $here/$name"
    fi
fi
reason=$(sed -n 's/^  "reason": "\(.*\)",\{0,1\}$/\1/p' "${verdict:-/dev/null}" 2>/dev/null | head -n 1)

case $code in
    0) say "GO: $verdict"; exit 0 ;;
    1) say "NO-GO: $verdict"
       drain "${reason:-rocmcheck NO-GO: see $verdict}"
       exit 1 ;;
esac
reason=${reason:-"rocmcheck UNKNOWN: $problem"}
if [ "$ROCMCHECK_ON_UNKNOWN" = run ]; then
    say "UNKNOWN, the job runs (ROCMCHECK_ON_UNKNOWN=run): $reason"
    exit 0
fi
drain "$reason"
exit 2
