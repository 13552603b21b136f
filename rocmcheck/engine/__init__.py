"""The engine: one run, from the options a front-end built to the verdicts it hands back.

`options` checks what was asked once; `selection` and `devices` decide which variants run on which
devices; `runner` queues them per device and journals every verdict; `isolation` takes each task to
a child (a worker per GPU, a child of its own, or a fresh interpreter) through `launch` and
`zygote`; `child` runs it and `probe_state` puts back what a worker's probe changed; `watchdog`,
`proctree` and `winjob` bound and end it; `capture` keeps its output; `verdicts` and `exitcodes`
turn what was seen into the one verdict. It renders nothing: what people read is `outputs/`.
"""
