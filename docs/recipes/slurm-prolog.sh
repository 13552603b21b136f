#!/bin/sh
started=$(date +%s)  # the time limit counts from slurmd's start of this file
# Slurm prolog: `rocmcheck gate` on this node before each job; every job's verdict is kept, and a
# node that fails is drained with a reason that names what failed. docs/recipes/slurm.md says
# what Slurm does with each outcome; `make slurm-test` runs this file in a one-node Slurm.
#
#   slurm.conf:  Prolog=/etc/slurm/prolog.d/*      (this file, executable; owned by root)
#                PrologFlags=Alloc                 (at allocation, on every node of the job)
#                PrologEpilogTimeout=120           (read here: the gate's deadline is kept 10 s below it)
#                SchedulerParameters=nohold_on_prolog_fail   (requeue a batch job without holding it)
#
# slurmd starts a prolog with SLURM_* variables only (no PATH) and no arguments, so the settings
# are set here: edit the defaults below, or point Prolog at a wrapper that exports them and
# execs this file.
#   ROCMCHECK              absolute path of the rocmcheck of the environment with the cluster's torch
#                          (unset: the first of /opt/rocmcheck/bin, /usr/local/bin, /usr/bin that has one)
#   ROCMCHECK_DIR          where verdicts and reports go (a shared folder: `rocmcheck matrix DIR/reports`)
#   ROCMCHECK_EXPECT_GPUS  the GPU count every node of this partition must show
#   ROCMCHECK_DEADLINE     the whole gate's budget in seconds: it ends UNKNOWN with its verdict written.
#                          Unset: the time limit less 10 s (half of it below 20 s), else 110; one above
#                          that is lowered, with a line in the log, and the verdict's notes say so
#   ROCMCHECK_TIME_LIMIT   the seconds after which this prolog is killed (unset: Slurm's PrologEpilogTimeout,
#                          from `scontrol show config`; 65534 there is no limit). slurmd sends SIGTERM and
#                          SIGKILL 10 ms apart: a gate killed so would leave only its start record
#   ROCMCHECK_ON_UNKNOWN   drain (default) or run: what a gate that could not assess (exit 2) does
#   ROCMCHECK_ARGS         more `rocmcheck gate` options, split on spaces (a narrower gate, --timeout)
#   ROCMCHECK_DRAIN        scontrol (default): drain the node itself; no: only say the reason on stdout
#                          (docs/recipes/rocmcheck.nhc runs this file so, and NHC drains)
#   SCONTROL               absolute path of scontrol (unset: found in /usr/bin, /usr/local/bin, /opt/slurm/bin)
#
# Files, per node (named by $SLURMD_NODENAME): DIR/verdicts/NODE/TIME-jobID-PID.json, one per run.
# It holds an UNKNOWN record ("started at T, not finished: killed or still running") from the
# start, replaced by the verdict when the gate ends; each write goes to a hidden temporary file
# that is renamed, so a prolog killed at any point leaves a valid verdict naming its job and never
# touches an earlier one (a temporary file a killed writer left is removed by the next gate).
# DIR/verdicts/NODE/latest.json links the newest finished one; DIR/verdicts/NODE/prolog.log holds
# the gate's lines and this script's. Exit: 0 the job runs (GO, or UNKNOWN under
# ROCMCHECK_ON_UNKNOWN=run), 1 NO-GO, 2 UNKNOWN: the node is drained.
ROCMCHECK=${ROCMCHECK:-}
ROCMCHECK_DIR=${ROCMCHECK_DIR:-/var/log/rocmcheck}
ROCMCHECK_EXPECT_GPUS=${ROCMCHECK_EXPECT_GPUS:-}
ROCMCHECK_DEADLINE=${ROCMCHECK_DEADLINE:-}
ROCMCHECK_TIME_LIMIT=${ROCMCHECK_TIME_LIMIT:-}
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
host=$(uname -n | cut -d. -f1 | tr -cs 'A-Za-z0-9-' '-' | sed 's/^-*//; s/-*$//' | cut -c1-32)  # as the gate names temps
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

# The verdict of a gate that gave none (it could not be started, or died), or the start record
# (partial: WHY says it is not finished): UNKNOWN, the gate's shape.
unknown_verdict() {
    why=$(printf '%s' "$1" | tr -c ' -~' '?' | tr -d "\"'\\\\\`\$")
    printf '{\n  "schema": "rocmcheck-node-verdict",\n  "schema_version": "1.2",\n  "node": "%s",\n' "$node"
    jid=null
    [ -n "$job" ] && jid="\"$job\""
    printf '  "job_id": %s,\n  "checked_at": "%s",\n  "status": "UNKNOWN",\n  "exit_code": 2,\n' "$jid" \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '  "reason": "rocmcheck UNKNOWN: %.231s",\n  "error": "%s",\n  "failing": [],\n' "$why" "$why"
    printf '  "partial": %s\n}\n' "${2:-false}"
}

# Keep stdin as this job's verdict: written whole to a hidden temporary file named by this
# process, then renamed over the verdict (a reader sees the old one or the new one, never half).
keep() {
    cat > "$tmp" && mv -f "$tmp" "$here/$name"
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
case $ROCMCHECK_TIME_LIMIT in  # counted with here (the gate checks ROCMCHECK_DEADLINE)
    ''|[1-9]|[1-9][0-9]|[1-9][0-9][0-9]|[1-9][0-9][0-9][0-9]|[1-9][0-9][0-9][0-9][0-9]) ;;
    *) problem="ROCMCHECK_TIME_LIMIT=$ROCMCHECK_TIME_LIMIT must be a whole number of seconds from 1 to 99999" ;;
esac

stamp=$(date -u +%Y%m%dT%H%M%SZ)
name="$stamp-${label:-nojob}-$$.json"
tmp="$here/.$name.$host-$$.tmp"
started_at=$(date -u -d "@$started" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
if ! mkdir -p "$here" "$ROCMCHECK_DIR/reports" 2>/dev/null ||
   ! unknown_verdict "started at $started_at, not finished: killed or still running" true | keep 2>/dev/null; then
    problem="cannot write verdicts to $here"
    tmp=
fi

if [ -n "$problem" ]; then
    code=2
    say "could not assess: $problem"
    [ -n "$tmp" ] && unknown_verdict "$problem" | keep
else
    # The time limit: the setting, else Slurm's (an RPC to slurmctld, bounded); less the time spent here.
    limit=$ROCMCHECK_TIME_LIMIT
    if [ -z "$limit" ] && [ -n "$SCONTROL" ]; then
        limit=$(timeout 5 "$SCONTROL" show config 2>/dev/null | sed -n 's/^PrologEpilogTimeout *= *//p')
        case $limit in
            [1-9]|[1-9][0-9]|[1-9][0-9][0-9]|[1-9][0-9][0-9][0-9]|[1-9][0-9][0-9][0-9][0-9])
                [ "$limit" -lt 65534 ] || limit= ;;  # 65534: Slurm waits for the prolog without limit
            *) say "PrologEpilogTimeout not read from '$SCONTROL show config' (${limit:-no answer}): no time limit"
               limit= ;;
        esac
    fi
    left=
    if [ -n "$limit" ]; then
        left=$((limit - ($(date +%s) - started) - 1))  # whole seconds: one more for the part second
        [ "$left" -ge 1 ] || left=1
    fi
    deadline=$ROCMCHECK_DEADLINE
    [ -z "$deadline" ] && [ -z "$left" ] && deadline=110
    set -f  # ROCMCHECK_ARGS is split on spaces, as documented, and never globbed ('transfer*' stays)
    # shellcheck disable=SC2086
    "$ROCMCHECK" gate ${deadline:+--deadline "$deadline"} ${left:+--killed-after "$left"} --verdict "$here/$name" \
        --out-dir "$ROCMCHECK_DIR/reports" ${ROCMCHECK_EXPECT_GPUS:+--expect-gpus "$ROCMCHECK_EXPECT_GPUS"} \
        $ROCMCHECK_ARGS >> "$log" 2>&1
    code=$?
    # not started (126, 127), died, or a rocmcheck without --verdict: the start record is still there
    if [ "$code" -gt 2 ] || grep -q '^  "error": "started at .*, not finished: killed or still running"' "$here/$name"
    then
        say "rocmcheck gave no verdict (exit $code): $ROCMCHECK"
        unknown_verdict "rocmcheck exited $code without a verdict" | keep
        code=2
    fi
fi

verdict=
if [ -n "$tmp" ]; then
    verdict="$here/$name"
    { ln -sf "$name" "$here/.latest.$$" && mv -f "$here/.latest.$$" "$here/latest.json"; } 2>/dev/null ||
        say "could not point $here/latest.json at $name"
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
