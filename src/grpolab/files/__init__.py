"""Files grpolab writes and files users hand it: one module per job, imported by name (nothing is re-exported here).

- `atomic`: whole files and directories written so that a process killed at any moment leaves whole files; a
  file's hash; a free name for a set-aside.
- `locks`: flock locks, released by the kernel when their holder dies.
- `json_files`: JSON Lines rows appended or replaced, and JSON / JSON Lines files of a run read defensively.
- `limits`: the size and nesting limits on what users hand us, in one place.
- `nesting`: counting how deeply JSON or TOML text nests, without parsing it, and refusing it over the limit.
- `user_input`: reading a file, stream or JSON Lines file the user named, within the limits.
- `outputs`: outputs the user names (-o, --save, --html, --out): checked before any work, written through or
  replaced in one rename, never a folder made for them.
- `kinds`: what a path is (a special file under /proc, /sys or /dev, a FIFO, a device...), in words a refusal
  quotes.

The run directory (`grpolab.rundir`), the model cache (`grpolab.models`), exports and reports all write through
`atomic`: readers see the old file or the new one, never half of one. Every file or text a user names (configs,
completions, data files, tool arguments) is read through `user_input` / `nesting`, and every refusal quotes the
limit it hit.
"""
