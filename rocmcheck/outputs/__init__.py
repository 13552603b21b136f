"""What a run leaves behind: the report files and every text made from a report.

`storage` writes and reads the journal and the JSON report; `render` the terminal lines and the
Markdown matrix; `matrix` and `matrix_html` the matrix over many reports; `diff` compares two;
`node` the scheduler's verdict; `bugreport` and `repro` the upstream bug report and its
reproducers. Nothing here runs a probe or imports the engine.
"""
