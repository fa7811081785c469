"""The command line: parse, call the library, turn VaememError into one line and an exit code.

Heavy imports (torch, diffusers, pandas, scipy, matplotlib) happen inside the commands, so ``vaemem --help`` and
``vaemem estimate`` stay fast.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from vaemem.errors import VaememError
from vaemem.estimate import MIB  # stdlib only: the CLI stays light
from vaemem.files import check_writable, default_path, packaged_coefficients

# The schemas of what the commands print with --json (or --format json); a file's own schema is its owner's.
MODELS_SCHEMA_VERSION = 1  # of `vaemem models --json`: {"schema_version", "models": [...]}
TRACE_SCHEMA_VERSION = 1  # of `vaemem trace --json`: {"schema_version", "traces": [...]}, one per point
ESTIMATE_SCHEMA_VERSION = 1  # of `vaemem estimate --json`
REPORT_SCHEMA_VERSION = 1  # of `vaemem report --format json`


def _untyped_flags(params: list[Any]) -> None:
    """Show these options' flags without a type: a flag takes no value, where typer's help says "<bool>"."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""


class _Group(TyperGroup):
    """The command group, refusing an option of one value given twice (click would keep the last silently:
    ``vaemem estimate -m sd15 -m sdxl`` priced sdxl alone)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        name = next((a for a in args if not a.startswith("-")), None)
        command = self.get_command(ctx, name) if name else None
        if command is not None and "--help" not in args:
            options = [p for p in command.params if p.param_type_name == "option"]
            valued = {o for p in options if not (getattr(p, "is_flag", False) or getattr(p, "count", False))
                      for o in p.opts}
            single = {o: p.opts[0] for p in options if not p.multiple for o in p.opts if o in valued}
            longs = {o for p in options for o in [*p.opts, *p.secondary_opts] if o.startswith("--")}
            seen: set[str] = set()
            tokens = iter(args[args.index(name) + 1:])
            for token in tokens:
                if token == "--":
                    break
                option = token.split("=", 1)[0] if token.startswith("--") else token[:2]
                if option in single:
                    if single[option] in seen:
                        raise typer.BadParameter("given twice: it takes one value", param_hint=option)
                    seen.add(single[option])
                if token == option and option in valued:  # its value is the next token
                    value = next(tokens, None)
                    # a forgotten value: click would take the next option as it (`fit --out --check` wrote a
                    # file named --check, `measure --out --dry-run` measured)
                    if value is not None and value.split("=", 1)[0] in longs:
                        raise typer.BadParameter(f"needs a value, and the next word is the option {value}",
                                                 param_hint=option)
        return super().parse_args(ctx, args)

    def get_command(self, ctx: Any, name: str) -> Any:
        """The command, its one-line summary in the list of commands its docstring's first paragraph on one line
        (typer's rich help keeps the docstring's line breaks there), its flags shown without a type."""
        command = super().get_command(ctx, name)
        if command is not None and command.short_help is None and command.help:
            command.short_help = " ".join(inspect.cleandoc(command.help).split("\n\n")[0].split())
        if command is not None:  # a flag takes no value: typer's help would show it "<bool>", and `--slicing
            # true` is refused
            _untyped_flags([*command.params, command.get_help_option(ctx)])
        return command

    def get_help_option(self, ctx: Any) -> Any:
        """The group's --help, its flags (--version and this) shown without a type as its commands' are
        (:meth:`get_command`)."""
        option = super().get_help_option(ctx)
        _untyped_flags([*self.params, option])
        return option

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        """Click's main, a usage error said in one line (``error: ...``, exit 2) where click would print the
        usage and a boxed message."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.Abort:  # ^C outside a sweep (a sweep says what it kept and exits 130 itself)
            typer.echo("aborted", err=True)
            sys.exit(130)
        except Exception as e:  # click's usage errors, by their interface (typer carries its own click)
            if not (hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int)):
                raise
            if type(e).__name__ == "NoArgsIsHelpError":  # `vaemem` alone: its help
                e.show()  # type: ignore[attr-defined]
            else:
                ctx = getattr(e, "ctx", None)
                where = f" (`{ctx.command_path} --help`)" if ctx is not None else ""
                typer.echo(f"error: {e.format_message()}{where}", err=True)  # type: ignore[attr-defined]
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Measure, fit and estimate the working memory of VAE decode and encode.")


def _version(value: bool) -> None:
    if value:
        from vaemem import __version__

        typer.echo(f"vaemem {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """Measure, fit and estimate the working memory of VAE decode and encode."""


SKIP_BAD_HELP = "skip malformed lines (each is listed) instead of failing"
PIPED_WIDTH = 1000  # columns: wider than any table vaemem prints


def _console() -> Any:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # piped or captured: every table at its natural width, no cell cut short
        console = Console(width=PIPED_WIDTH)
    return console


def _fail(error: VaememError) -> None:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(error.exit_code)


def _lines(path: Path) -> int:
    """The records in the JSON Lines file ``path`` (each append is one whole line or nothing); 0 where it cannot be
    read (none yet, or a path the command refuses with its own message)."""
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def _interrupted(kept: str) -> None:
    """Ctrl-C in a long command: one line saying what it kept, exit 130, as an interrupted sweep says it."""
    typer.echo(f"interrupted: {kept}", err=True)
    raise typer.Exit(130)


@app.command()
def models(as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table")) -> None:
    """List the model zoo: class, parameters, latent channels, spatial/temporal factors, shared architecture."""
    from vaemem.models.zoo import PARAMETERS, registry

    rows = []
    for name, spec in registry().items():
        rows.append({"name": name, "class": spec.class_name, "parameters": PARAMETERS[name],
                     "latent_channels": spec.latent_channels, "spatial_factor": spec.spatial_factor,
                     "temporal_factor": spec.temporal_factor, "ops": list(spec.ops),
                     "shares_architecture_with": spec.architecture if spec.architecture != name else None})
    if as_json:
        typer.echo(json.dumps({"schema_version": MODELS_SCHEMA_VERSION, "models": rows}, indent=1))
        return
    from rich.table import Table

    table = Table("name", "class", "parameters", "latent ch", "spatial", "temporal", "ops", "shares")
    for r in rows:
        table.add_row(r["name"], r["class"], f"{r['parameters']:,}", str(r["latent_channels"]),
                      str(r["spatial_factor"]), str(r["temporal_factor"] or "-"), ",".join(r["ops"]),
                      r["shares_architecture_with"] or "")
    _console().print(table)


@app.command()
def measure(
    model: list[str] = typer.Option([], "--model", "-m", help="zoo model name (repeatable)"),
    op: list[str] = typer.Option([], "--op", help="decode or encode (repeatable)"),
    dtype: list[str] = typer.Option([], "--dtype", help="fp16, bf16 or fp32 (repeatable)"),
    res: list[str] = typer.Option([], "--res", help="WIDTH or WIDTHxHEIGHT in pixels (repeatable)"),
    batch: list[int] = typer.Option([], "--batch", help="batch size (repeatable, default 1)"),
    frames: list[int] = typer.Option([], "--frames", help="frames for video models (repeatable, default 17)"),
    tile: list[int] = typer.Option([], "--tile", help="square tile side in px for tiled decode/encode (repeatable)"),
    overlap: list[float] = typer.Option([], "--overlap", help="tile overlap fraction of tiled points (repeatable, "
                                        "default 0.25, diffusers' own)"),
    slicing: bool = typer.Option(False, "--slicing", help="diffusers' enable_slicing: batches one sample at a "
                                 "time (points of batch > 1)"),
    attention_path: str = typer.Option("fused", "--attention", help="fused (SDPA kernels) or math (torch's "
                                       "math kernel only: score matrices materialised)"),
    conv3d_path: str = typer.Option("native", "--conv3d", help="native, or decomposed (conv3d as conv2d: Wan, "
                                    "MiniMax-H3)"),
    allocator: list[str] = typer.Option([], "--allocator", help="native, cudaMallocAsync, expandable, "
                                        "expandable-off (GPU); glibc, glibc-fixed (CPU, Linux); system (CPU "
                                        "elsewhere). Repeatable; default: native on a GPU, glibc-fixed on a Linux "
                                        "CPU, system elsewhere"),
    sweep: Optional[Path] = typer.Option(None, "--sweep", help="a sweep file (TOML or JSON) instead of grid options"),
    runs: Optional[int] = typer.Option(None, help="fresh-process runs per point (default 2, or the sweep file's "
                                       "runs)", show_default=False),
    device: Optional[str] = typer.Option(None, help="cpu, cuda, cuda:N, mps, xpu (default: cpu, or a plan's)"),
    launcher: Optional[str] = typer.Option(None, help="fork (default on Linux) or spawn"),
    timeout: float = typer.Option(900.0, help="seconds before a run is killed and recorded as timeout"),
    shard_spec: Optional[str] = typer.Option(None, "--shard", help="K/N: run the stable K-th of N of the grid"),
    devices: Optional[str] = typer.Option(None, help="GPU indices, e.g. 0,1: one point per GPU at a time"),
    rig: Optional[str] = typer.Option(None, help="rig name (default <hostname>-<device type>)"),
    out: Optional[Path] = typer.Option(None, help="JSON Lines file (default measurements/<rig>.jsonl, or "
                                       "measurements/<rig>.shard-K-of-N.jsonl with --shard)"),
    force: bool = typer.Option(False, help="re-run runs already recorded for this rig"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="re-measure runs recorded as crash, timeout, "
                                      "skipped-after-oom or dropped-late (a resume keeps them otherwise)"),
    as_json: bool = typer.Option(False, "--json", help="print the new records as JSON instead of a table"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan and its predicted time, run nothing"),
) -> None:
    """Measure the working memory of each point, one fresh process per run, appending to a JSON Lines file.

    Before it starts it prints how many runs are due (after resume) and their predicted time, from comparable
    runs in the output file's folder."""
    from vaemem.measuring import point as pt
    from vaemem.measuring.plumbing.launcher import default_launcher
    from vaemem.measuring.child.rig import rig_name as resolve_rig_name
    from vaemem.measuring.parent.sweepfile import load_sweep

    budget: tuple | None = None
    given_device, device = device, device or "cpu"
    try:
        if force and retry_failed:
            raise VaememError("--force re-runs every run: --retry-failed adds nothing to it")
        if sweep is not None:
            if model or op or dtype or res or batch or frames or tile or allocator or overlap or slicing \
                    or attention_path != "fused" or conv3d_path != "native":
                raise VaememError("give either --sweep or grid options (--model/--op/--dtype/--res, ...), not both")
            sw = load_sweep(sweep, device)
            points, runs = sw.points, sw.runs if runs is None else runs  # given, --runs wins (2 included)
            if sw.budget_s is not None:  # a plan carries its device and its budget
                if given_device is not None and given_device not in (points[0].device,
                                                                     points[0].device.split(":")[0]):
                    raise VaememError(f"{sweep} is a plan for {points[0].device}: --device {device} contradicts it")
                device = points[0].device
                budget = (sw.budget_s, sw.predicted_s)
        else:
            runs = 2 if runs is None else runs
            points = pt.build_grid(model, op, dtype, res, batch or None, frames or None,
                                   list(tile) or None, allocator or None, device, list(overlap) or None,
                                   [slicing], [attention_path], [conv3d_path])
        shard_k_n = pt.parse_shard(shard_spec) if shard_spec else None
        if shard_k_n:
            points = pt.shard(points, *shard_k_n)
        gpu_list = _parse_devices(devices)
        rig_name = resolve_rig_name(rig, device)
        # a shard writes a file of its own: shards of a Slurm array or CI matrix often share a network filesystem,
        # where file locks are not to be trusted; resume, fit and report read every file of the folder
        default_name = f"{rig_name}.shard-{shard_k_n[0]}-of-{shard_k_n[1]}.jsonl" if shard_k_n else f"{rig_name}.jsonl"
        out_path = out or default_path("measurements") / default_name
        from vaemem.measuring.parent.runner import check_options
        from vaemem.measuring.parent.store import check_out_path

        # before the plan or the bar: a bad option or output file is one line, and nothing starts
        check_options(points, runs, launcher or default_launcher(), timeout, gpu_list)
        check_out_path(out_path)
        if dry_run:
            from vaemem.measuring.parent.runner import sweep_plan

            _print_plan(len(points), runs, out_path, rig_name, *sweep_plan(points, out_path, rig_name, runs, force,
                                                                           retry_failed), as_json, budget)
        else:
            from vaemem.measuring.parent.runner import check_devices

            check_devices(points, gpu_list)  # a plan may be printed for another rig; a run needs the device here
            _run_sweep(points, out_path, rig_name, runs, launcher or default_launcher(), timeout, force,
                       retry_failed, gpu_list, as_json, budget)
    except VaememError as e:
        _fail(e)


def _count(n: int, noun: str) -> str:
    """'1 run', '2 runs'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _print_plan(n_points: int, runs: int, out: Path, rig: str, tasks: list, history: list, as_json: bool,
                budget: tuple | None = None) -> None:
    """One line: points, runs due after resume, predicted minutes on ``rig`` (to stderr when the output is JSON).
    A plan file's own prediction (its cost model) is said beside its budget."""
    from vaemem.measuring.parent.eta import predict

    if budget is not None:
        due = sum(budget[1].get(t.point.key, 0.0) for t in tasks)
        line = (f"{_count(len(tasks), 'run')}, predicted {due / 60:.1f} min by the plan's cost model, budget "
                f"{budget[0] / 60:g} min (past it, the lowest-priority points are dropped)")
    else:
        line = predict([t.point for t in tasks], history, rig).describe()
    typer.echo(f"plan: {_count(n_points, 'point')} x {_count(runs, 'run')}, {len(tasks)} due in {out}: {line}",
               err=as_json)


@app.command()
def trace(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="zoo model name (or a label for --config)"),
    config: Optional[Path] = typer.Option(None, "--config", help="any diffusers VAE config.json instead of a zoo "
                                          "name"),
    op: list[str] = typer.Option([], "--op", help="decode or encode (repeatable)"),
    dtype: str = typer.Option("fp32", help="fp16, bf16 or fp32"),
    res: list[str] = typer.Option([], "--res", help="WIDTH or WIDTHxHEIGHT in pixels (repeatable)"),
    batch: list[int] = typer.Option([], "--batch", help="batch size (repeatable, default 1)"),
    frames: list[int] = typer.Option([], "--frames", help="frames of a video model (repeatable, default 1)"),
    tile: list[int] = typer.Option([], "--tile", help="square tile side in px: diffusers' tiling (repeatable)"),
    overlap: float = typer.Option(0.25, help="tile overlap fraction (diffusers' default 0.25)"),
    attention: str = typer.Option("fused", help="fused (an SDPA kernel) or math (score matrix materialised)"),
    slicing: bool = typer.Option(False, "--slicing", help="diffusers' enable_slicing: one batch item at a time"),
    conv3d: str = typer.Option("native", help="native or decomposed (conv2d decomposition; Wan, MiniMax-H3)"),
    record_to: Optional[Path] = typer.Option(None, "--record", help="merge the results into this dry-run cache "
                                             "(e.g. fits/traces.json)"),
    zoo: bool = typer.Option(False, "--zoo", help="instead of a grid: every dry run that derives the structure of "
                             "every real architecture (what `vaemem fit` reads from fits/traces.json)"),
    jobs: int = typer.Option(1, "--jobs", "-j", help="dry runs at a time, each in a process of its own (they "
                             "use one core each)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON: schema_version and traces, one object per "
                                 "point (peak_bytes, output_bytes, peak_module, ...)"),
) -> None:
    """Dry-run decode or encode on fake tensors: the exact peak of live tensor bytes the op creates (its input
    and the weights are baseline), where it happens and how much is the output. No device: the op allocates
    nothing (the build makes each weight in host memory in turn, then moves it to the meta device)."""
    from vaemem.measuring.point import parse_res
    from vaemem.tracing.trace import TraceSpec, check, load_config, trace_many

    results: list = []
    specs: list = []
    try:
        cfg = None
        if zoo:
            given = [flag for flag, v in (("--model", model), ("--config", config), ("--op", op), ("--res", res),
                                          ("--batch", batch), ("--frames", frames), ("--tile", tile),
                                          ("--overlap", overlap != 0.25), ("--attention", attention != "fused"),
                                          ("--slicing", slicing), ("--conv3d", conv3d != "native"),
                                          ("--dtype", dtype != "fp32")) if v]
            if given:
                raise VaememError(f"--zoo runs the whole structure grid: give it without {', '.join(given)}")
            if record_to is None:  # minutes of dry runs, printed only at the end: each kept as it ends instead
                raise VaememError("--zoo runs the whole structure grid (minutes) and keeps each dry run as it ends: "
                                  "give --record FILE (fits/traces.json, which `vaemem fit` reads; it resumes)")
            from vaemem.tracing.structure import zoo_grid

            specs = zoo_grid()
        else:
            if model is None and config is None:
                raise VaememError("give --model NAME (a zoo model), --config FILE (a diffusers VAE config.json) "
                                  "or --zoo")
            cfg = load_config(str(config)) if config is not None else None
            # a config's dry run is named config:LABEL, never as a zoo model's (its key would be the zoo model's);
            # unlabelled, by its folder (diffusers names every such file config.json)
            name = model or ""
            if config is not None:
                folder = config.resolve().parent.name
                name = "config:" + (model or (folder if config.stem == "config" and folder else config.stem))
            if not op or not res:
                raise VaememError("a dry run needs at least one --op and one --res")
            # a point given twice is traced once, as measure runs it once
            specs = list(dict.fromkeys(TraceSpec(name, o, dtype, *parse_res(r), b, f, t, overlap, attention, slicing,
                                                 conv3d)
                                       for o in op for r in res for b in (batch or [1]) for f in (frames or [1])
                                       for t in (tile or [None])))
            for s in specs:  # every point refused here, before torch is imported (seconds)
                check(s, cfg)
        if record_to is not None and cfg is not None:
            raise VaememError("--record keeps zoo models only: a config file has no stable name")
        if jobs < 1:
            raise VaememError(f"--jobs must be 1 or more, got {jobs}")
        from vaemem.tracing import cache as tc  # imports torch

        if cfg is not None:
            from vaemem.models.build import ignored_config_keys

            ignored = ignored_config_keys(cfg)
            if ignored:  # the dry run is of diffusers' defaults there: say so where a typo would go unseen
                typer.echo(f"warning: {config}: diffusers' {cfg['_class_name']} takes no {', '.join(ignored)}: "
                           f"ignored, its defaults traced", err=True)

        doc = tc.read_cache(record_to) if record_to is not None and record_to.exists() else None
        done = {k for k, e in doc["entries"].items() if tc.complete(e)} if zoo and doc is not None else set()
        for r in trace_many([s for s in specs if s.key not in done], cfg, jobs):  # a resumed --zoo skips the cached
            results.append(r)
            if record_to is not None:  # one at a time: an interrupted --zoo keeps what it traced
                doc = tc.record(record_to, results[-1:], doc)
        if zoo and record_to is not None:  # the cache holds exactly the zoo grid
            tc.keep_only(record_to, {s.key for s in specs})
        if not results:  # with --json, said on stderr: a script reads an empty list
            typer.echo(f"nothing to do: {record_to} holds all {len(specs)} dry runs", err=as_json)
            if not as_json:
                return
    except VaememError as e:
        _fail(e)
    except KeyboardInterrupt:  # each dry run is recorded as it ends (the file says how many: one may be mid-write)
        if record_to is None:
            _interrupted(f"{_count(len(results), 'dry run')} done, none kept (--record FILE keeps them)")
        from vaemem.tracing import cache as tc

        held = tc.read_cache(record_to)["entries"] if record_to.exists() else {}
        _interrupted(f"{record_to} holds {sum(s.key in held for s in specs)} of the {len(specs)} dry runs asked")
    if as_json:
        # one shape for any number of points: a script need not know how many the grid held after dedup
        typer.echo(json.dumps({"schema_version": TRACE_SCHEMA_VERSION, "traces": [r.to_dict() for r in results]},
                              indent=1, sort_keys=True))
        return
    from rich.table import Table

    table = Table("point", "peak MiB", "oneDNN MiB", "oneDNN no-AMX MiB", "output MiB", "input MiB",
                  "attention MiB", "peak in", "replayed calls", "s",
                  title=f"dry run (torch {results[0].torch_version}, diffusers {results[0].diffusers_version})",
                  caption="peak: the live tensors the op creates (not a reservation: `vaemem estimate` prices one); "
                          "oneDNN: with the buffers a CPU's ops hold while they run (a CPU with AMX; no-AMX: without "
                          "AMX tiles); replayed calls: repeats priced from their first call; s: seconds of dry run")
    for r in results:
        table.add_row(r.spec.key, f"{r.peak_bytes / MIB:.1f}",
                      f"{r.onednn_peak_bytes / MIB:.1f}", f"{r.onednn_peak_bytes_no_amx / MIB:.1f}",
                      f"{r.output_bytes / MIB:.1f}",
                      f"{r.input_bytes / MIB:.1f}", f"{r.attention_peak_bytes / MIB:.1f}" if r.attention_peak_bytes
                      else "-", r.peak_module, str(r.replayed_calls), f"{r.wall_s:.2f}")
    _console().print(table)
    if record_to is not None:
        typer.echo(f"recorded {len(results)} dry runs in {record_to}")


def _parse_devices(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        found = [int(x) for x in text.split(",")]
    except ValueError:
        raise VaememError(f"bad --devices {text!r}: write GPU indices like 0,1") from None
    if any(d < 0 for d in found) or len(set(found)) != len(found):
        raise VaememError(f"bad --devices {text!r}: distinct non-negative GPU indices, like 0,1")
    return found


def _run_sweep(points: list, out: Path, rig: str, runs: int, launcher: str, timeout: float, force: bool,
               retry_failed: bool, devices: list[int] | None, as_json: bool, budget: tuple | None = None) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from vaemem.measuring.parent.runner import measure as run_measure
    from vaemem.report.tables import sweep_table

    import signal

    class Terminated(KeyboardInterrupt):
        """SIGTERM (or SIGHUP: the terminal closed, the ssh session dropped), raised where the sweep is, so the
        launcher kills every child group and removes its files."""

        def __init__(self, signum: int) -> None:
            super().__init__()
            self.signum = signum

    def on_term(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    # SIGHUP where the platform has it (not Windows), unless ignored: `nohup vaemem measure` must outlive its shell
    hup = getattr(signal, "SIGHUP", None)
    caught = [signal.SIGTERM] + ([hup] if hup is not None and signal.getsignal(hup) is not signal.SIG_IGN else [])
    previous = {sig: signal.signal(sig, on_term) for sig in caught}
    console = _console()
    records: list[dict] = []
    start = _lines(out)
    planned: list[int] = []
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn()]
    try:
        bar = Progress(*columns, console=console, transient=as_json, disable=as_json)
        task = bar.add_task("measuring", total=None)

        def on_plan(tasks: list, history: list) -> None:  # the bar appears once the folder is read and a run is due
            planned.append(len(tasks))
            _print_plan(len(points), runs, out, rig, tasks, history, as_json, budget)
            if tasks:
                bar.update(task, total=len(tasks))
                bar.start()

        def on_record(r: dict) -> None:
            records.append(r)
            bar.update(task, advance=1, description=f"{r['point_key']} run {r['run']}: {r['status']}")

        try:
            run_measure(points, out, rig=rig, runs=runs, launcher=launcher, timeout_s=timeout, force=force,
                        retry_failed=retry_failed, devices=devices, on_record=on_record, on_plan=on_plan,
                        budget_s=budget[0] if budget else None, predicted_s=budget[1] if budget else None)
        finally:
            bar.stop()
    except KeyboardInterrupt as stop:
        how = ("interrupted" if not isinstance(stop, Terminated) else "terminated" if stop.signum == signal.SIGTERM
               else "hung up")
        # the file's count: an interrupt can land between a record's append and the callback that counts it
        typer.echo(f"{how}: {_count(_lines(out) - start, 'run')} kept in {out}", err=True)
        raise typer.Exit(128 + stop.signum if isinstance(stop, Terminated) else 130) from None
    except VaememError as e:  # e.g. a full disk: the sweep stops, and says what it kept
        raise VaememError(f"{e}; the sweep stopped, {_count(len(records), 'run')} kept in {out}", e.exit_code) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if planned == [0]:
        # a resume reads every measurement file of the output's folder: the runs may be in another of them
        typer.echo(f"nothing to do: all {_count(len(points), 'point')} x {_count(runs, 'run')} are already "
                   f"recorded for rig {rig} in {out.parent}/*.jsonl (--force re-runs them into {out})", err=as_json)
        if as_json:  # a script reads the new records: none
            typer.echo("[]")
        return
    if as_json:
        typer.echo(json.dumps(records, indent=1, sort_keys=True))
    else:
        console.print(sweep_table(records))
        console.print(f"{_count(len(records), 'run')} appended to {out}")


@app.command()
def plan(
    budget_min: float = typer.Option(15.0, "--budget-min", help="minutes of measuring the plan may take"),
    device: str = typer.Option("cpu", help="cpu, cuda, cuda:N, mps, xpu"),
    op: list[str] = typer.Option([], "--op", help="decode, encode (repeatable; default both)"),
    dtype: list[str] = typer.Option([], "--dtype", help="fp16, bf16, fp32 (repeatable; default fp32 on the CPU, "
                                    "bf16 on a GPU)"),
    allocator: list[str] = typer.Option([], "--allocator", help="allocator keys to calibrate (repeatable; default "
                                        "glibc-fixed on the CPU, native on a GPU)"),
    video: bool = typer.Option(True, "--video/--no-video", help="calibrate the conv3d (video) class too"),
    tiles: bool = typer.Option(True, "--tiles/--no-tiles", help="calibrate tiled decode too"),
    batch: bool = typer.Option(True, "--batch/--no-batch", help="calibrate the per-sample (batch) term too"),
    rig: Optional[str] = typer.Option(None, help="rig whose measured runs set the cost model (default "
                                      "<hostname>-<device type>); none: the device's declared defaults"),
    out: Optional[Path] = typer.Option(None, help="plan file to write (a schema-2 sweep file for measure --sweep)"),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
) -> None:
    """Choose the points that fix this platform's calibration within a time budget, from the dry runs: each
    kernel class's architectures at both ends of their range, a one-frame clip, tiles and batch where asked. Prints
    the points with their predicted seconds and writes the plan that `vaemem measure --sweep` runs."""
    from vaemem.measuring import point as pt
    from vaemem.measuring.child.rig import rig_name as resolve_rig_name
    from vaemem.measuring.parent.runner import read_history
    from vaemem.measuring.parent.sweepfile import dumps_plan
    from vaemem.planning.cost import from_history
    from vaemem.planning.plan import make_plan

    try:
        if out is not None and out.suffix != ".toml":  # measure --sweep reads a file by its suffix
            raise VaememError(f"--out {out}: a plan is a TOML sweep file; name it NAME.toml")
        kind = device.split(":")[0]
        if kind not in pt.DEVICE_TYPES:
            raise VaememError(f"bad device {device!r}; choose one of: {', '.join(pt.DEVICE_TYPES)} (cuda:N too)")
        ops = op or list(pt.OPS)
        dtypes = dtype or (["fp32"] if kind == "cpu" else ["bf16"])
        allocs = allocator or [pt.default_allocator(device)]
        for name, values, valid in (("op", ops, pt.OPS), ("dtype", dtypes, pt.DTYPES)):
            bad = [v for v in values if v not in valid]
            if bad:
                raise VaememError(f"unknown --{name} {bad[0]!r}; choose one of: {', '.join(valid)}")
        rig_name = resolve_rig_name(rig, device)
        history = read_history(DEFAULT_MEASUREMENTS / f"{rig_name}.jsonl")
        cost = from_history(history, rig_name, device)
        result = make_plan(budget_min, device, cost, ops, dtypes, allocs, video, tiles, batch)
    except VaememError as e:
        _fail(e)
    rows = [(p.priority, p.point, p.predicted_s, p.why) for p in result.points]
    if rig == "none":  # the cost model's declared defaults, not a rig that measures: this machine's name does
        rig_name = resolve_rig_name(None, device)
    header = (f"A calibration plan (README, \"Measuring a rig\"), written by `vaemem plan --budget-min {budget_min:g} "
              f"--device {device}"
              f"`:\n{_count(len(rows), 'point')}, predicted {result.predicted_s / 60:.1f} min of {budget_min:g} "
              f"(cost model {cost.source}); {len(result.skipped)} candidates left out by the budget.\n"
              f"Run it: vaemem measure --sweep PLAN.toml --rig {rig_name} --out measurements/plans/{rig_name}.jsonl")
    text = dumps_plan(device, budget_min, cost.to_dict(), rows, header)
    if out is not None:
        from vaemem.files import write_atomic

        try:
            write_atomic(out, text)
        except VaememError as e:
            _fail(e)
    if as_json:
        from vaemem.measuring.parent.sweepfile import SWEEP_SCHEMA_VERSION

        # the plan's schema, the same as its TOML's (a reader of one reads the other's fields)
        typer.echo(json.dumps({"schema_version": SWEEP_SCHEMA_VERSION, "budget_min": budget_min, "device": device,
                               "cost_model": cost.to_dict(),
                               "predicted_min": round(result.predicted_s / 60, 2),
                               "points": [{"priority": q, "point_key": p.key, "predicted_s": s, "why": w}
                                          for q, p, s, w in rows],
                               "left_out": [p.point.key for p in result.skipped]}, indent=1))
        return
    from rich.table import Table

    table = Table("priority", "point", "predicted s", "why", title=f"plan: {_count(len(rows), 'point')}, predicted "
                  f"{result.predicted_s / 60:.1f} of {budget_min:g} min ({cost.source})")
    for q, p, s, w in rows:
        table.add_row(str(q), p.key, f"{s:.1f}", w)
    _console().print(table)
    if result.skipped:
        typer.echo(f"left out by the budget: {_count(len(result.skipped), 'point')} (in priority order: "
                   f"{', '.join(p.point.key for p in result.skipped[:3])}, ...)")
    if out is not None:
        typer.echo(f"wrote {out}: run it with `vaemem measure --sweep {out} --rig {rig_name} "
                   f"--out measurements/plans/{rig_name}.jsonl`")


# Defaults resolve under the checkout when vaemem runs from one (any working folder), else the current folder.
DEFAULT_MEASUREMENTS = default_path("measurements")
DEFAULT_COEFFICIENTS = packaged_coefficients()
DEFAULT_EXCEPTIONS = default_path("fits/exceptions.json")
DEFAULT_TRACES = default_path("fits/traces.json")
# as --help shows them: a full path is cut at 80 columns
SHOWN = {DEFAULT_MEASUREMENTS: "measurements/", DEFAULT_COEFFICIENTS: "the package's coefficients.json",
         DEFAULT_EXCEPTIONS: "fits/exceptions.json", DEFAULT_TRACES: "fits/traces.json"}


@app.command()
def fit(
    measurements: list[Path] = typer.Option([DEFAULT_MEASUREMENTS], "--measurements",
                                            show_default=SHOWN[DEFAULT_MEASUREMENTS],
                                            help="JSON Lines files or directories of them (repeatable)"),
    out: Path = typer.Option(DEFAULT_COEFFICIENTS, show_default=SHOWN[DEFAULT_COEFFICIENTS],
                             help="coefficient file to write (or to check)"),
    margin: float = typer.Option(0.05, help="safety margin: every envelope x (1 + this fraction); 0.05 is +5 %"),
    exceptions: Path = typer.Option(DEFAULT_EXCEPTIONS, show_default=SHOWN[DEFAULT_EXCEPTIONS],
                                    help="groups allowed past the quality bound, with reasons; none: no "
                                    "exceptions"),
    check_only: bool = typer.Option(False, "--check", help="re-derive and fail on any difference from --out"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help=SKIP_BAD_HELP),
    traces: Path = typer.Option(DEFAULT_TRACES, show_default=SHOWN[DEFAULT_TRACES],
                                help="dry-run cache the structures come from (vaemem trace --zoo "
                                "--record); where the default file is missing, the fit has pixel lines only"),
    replace: bool = typer.Option(False, "--replace", help="allow replacing the packaged coefficient file from "
                                 "measurements other than the default folder"),
) -> None:
    """Fit upper-envelope coefficients per group, the dry-run structures and the per-platform calibrations, and
    write the coefficient file atomically. The file holds the fit of exactly the measurements given. --check also
    verifies the dry-run cache (its digest, and that it was made with the installed torch and diffusers)."""
    from vaemem.fit import coefficients as co
    from vaemem.tracing import cache as tc

    written = False
    try:
        mine = [m.resolve() for m in measurements] != [DEFAULT_MEASUREMENTS.resolve()]  # not the project's data
        # the file to write or check, before the half minute of fitting
        if not check_only:
            check_writable(out)
        elif not out.is_file():
            raise VaememError(f"cannot read coefficient file {out}: "
                              + ("it is a directory" if out.is_dir() else "no such file"))
        if out.is_file():  # a newer vaemem's file: before the half minute of fitting, and never overwritten
            co.refuse_newer(out)
        data = _load_measurements(measurements, skip_bad)
        points = [p.point_key for _, pts in data.groups.values() for p in pts]
        if len(points) < 2:  # refused now, not after deriving structures
            raise VaememError(f"nothing to fit in {_count(data.runs, 'run')} ({''.join(points) or 'no point'}: one "
                              f"measured point, and every line goes through two); {out} not written")
        if not check_only and not replace and out.resolve() == DEFAULT_COEFFICIENTS and mine:
            raise VaememError(f"--out is the packaged coefficient file {out}, the fit of all of "
                              f"{DEFAULT_MEASUREMENTS}; to replace it with the fit of "
                              f"{', '.join(map(str, measurements))} add --replace, or write elsewhere with --out")
        cache = tc.read_cache(traces) if traces.exists() else None
        stale_runs = tc.incomplete(cache) if cache is not None else []
        if stale_runs:
            raise VaememError(f"{traces}: {len(stale_runs)} dry runs lack records this vaemem reads (an "
                              f"older vaemem's); re-run them: `vaemem trace --zoo --record {traces}`", 1)
        if check_only and cache is not None:
            stale = tc.check_versions(cache)
            if stale:
                raise VaememError(f"{traces}: " + "; ".join(stale) + ": re-run `vaemem trace --zoo --record "
                                  f"{traces}` with this torch", 1)
        if traces != DEFAULT_TRACES and not traces.exists():
            raise VaememError(f"--traces {traces}: no such file")
        if str(exceptions) == "none":  # said, not a mistyped path read as no exceptions
            reasons = {}
        elif exceptions != DEFAULT_EXCEPTIONS and not exceptions.exists():
            raise VaememError(f"--exceptions {exceptions}: no such file (give --exceptions none for no exceptions)")
        else:
            reasons = co.load_exceptions(exceptions)
        if exceptions == DEFAULT_EXCEPTIONS and mine:
            reasons = {g: r for g, r in reasons.items() if g in data.groups}  # the project's reasons for its own data
        result = co.fit_dataset(data, margin, reasons, cache)
        text = co.dumps(result.document)
        for g in result.unneeded:  # a reason kept past its need would come back stale if the line ever crossed
            typer.echo(f"exception not needed: {g} is within the {co.QUALITY_BOUND}x bound; remove it from "
                       f"{exceptions}", err=True)
        if result.violations:
            for v in result.violations:
                typer.echo(f"over bound: {v}", err=True)
            # the project's file serves the project's data, not yours
            where = ('a file of your own, {"schema_version": 1, "groups": {"GROUP ID": "reason"}}, given as '
                     "--exceptions FILE" if str(exceptions) == "none" or mine and exceptions == DEFAULT_EXCEPTIONS
                     else str(exceptions))
            raise VaememError(f"{_count(len(result.violations), 'point')} reserved more than {co.QUALITY_BOUND}x their "
                              f"demand; fix the data or list the group with a reason in {where}", 1)
        doc = result.document
        if not doc["groups"] and not doc["calibrations"]:  # a file that would price nothing, layered silently
            why = "; ".join(f"{u['group']}: {u['reason']}" for u in doc["unfitted"][:3]) or "no successful run"
            raise VaememError(f"nothing to fit in {_count(data.runs, 'run')} ({why}); {out} not written")
        if check_only:
            diffs = co.check(out, text)
            if diffs:
                for d in diffs:
                    typer.echo(f"differs: {d}", err=True)
                # the fit that writes the file checked, with every option the check was given (a plain `vaemem
                # fit` writes the packaged file from the default folder, whatever was checked)
                q = lambda v: shlex.quote(str(v))  # noqa: E731
                again = " ".join(["vaemem fit", *(f"--measurements {q(m)}" for m in measurements if mine),
                                  *([f"--out {q(out)}"] if out.resolve() != DEFAULT_COEFFICIENTS else
                                    ["--replace"] if mine else []),
                                  *([f"--margin {margin!r}"] if margin != 0.05 else []),
                                  *([f"--exceptions {q(exceptions)}"] if exceptions != DEFAULT_EXCEPTIONS else []),
                                  *([f"--traces {q(traces)}"] if traces != DEFAULT_TRACES else []),
                                  *(["--skip-bad"] if skip_bad else [])])
                raise VaememError(f"{out} is not what the measurements give ({_count(len(diffs), 'difference')}); "
                                  f"run `{again}`" + (" and commit the result" if out.resolve() == DEFAULT_COEFFICIENTS
                                                      else ""), 1)
            typer.echo(f"{out} is reproducible from {data.runs} runs ({len(doc['groups'])} pixel-line groups, "
                       f"{len(doc['calibrations'])} calibrations, {len(doc['structures'])} structures)")
            return
        co.write_atomic(out, text)
        written = True
        if doc["groups"]:
            _console().print(_coefficient_table(doc))
        lined, calibrated = co.calibrated_groups(doc)
        for u in doc["unfitted"]:
            if u not in calibrated:
                typer.echo(f"not fitted: {u['group']}: {u['reason']}")
        if calibrated:
            typer.echo(f"{_count(len(calibrated), 'group')} without a pixel line priced by their platform's "
                       f"calibration (`vaemem report`)")
        typer.echo(f"wrote {out} from {_count(data.runs, 'run')}: {_count(len(doc['calibrations']), 'calibration')} "
                   f"({_count(len(lined), 'group')} on lines of their own), "
                   f"{_count(len(doc['structures']), 'structure')}, {_count(len(doc['groups']), 'pixel-line group')}")
    except VaememError as e:
        _fail(e)
    except KeyboardInterrupt:  # the file is written whole by a rename, or not at all
        _interrupted("nothing checked" if check_only else f"{out} written" if written else f"{out} not written")


def _coefficient_table(doc: dict) -> Any:
    from rich.table import Table

    table = Table("group", "slope B/px", "base MiB", "points", "runs", "Mpx range", "worst", "median",
                  title=f"coefficients (margin {doc['margin']:.0%} included)")
    for g in doc["groups"]:
        table.add_row(g["group"], f"{g['slope_bytes_per_pixel']:.2f}", f"{g['base_bytes'] / MIB:.0f}",
                      str(g["n_points"]), str(g["n_runs"]),
                      f"{g['pixels_min'] / 1e6:.3f}-{g['pixels_max'] / 1e6:.3f}", f"{g['worst_ratio']:.3f}",
                      f"{g['median_ratio']:.3f}")
    return table


@app.command()
def diff(
    old: Path = typer.Argument(..., metavar="OLD", help="coefficient file before (packaged: the packaged one)"),
    new: Path = typer.Argument(..., metavar="NEW", help="coefficient file after (packaged: the packaged one)"),
    res: list[str] = typer.Option(["512", "1024"], "--res", help="resolutions to price (repeatable)"),
    tile: int = typer.Option(256, help="tile side in px used to price tiled groups"),
    frames: int = typer.Option(1, help="frames of a video architecture's clip (1 + its step x k)"),
) -> None:
    """Reservations before and after, in MiB, at chosen resolutions (batch 1, a sliced variant 2; tiled groups at
    --tile): every measured group, every architecture a calibration holds and every one it prices by transfer, each
    on every variant a calibration measured (slicing, the math attention path), in either file,
    each priced by both files exactly as an app would be. A cell the estimator refuses is n/a, and its reason is
    listed under the table."""
    from rich.table import Column, Table

    from vaemem import estimate as est
    from vaemem.fit.coefficients import read_coefficients
    from vaemem.measuring.point import parse_res

    try:
        if tile <= 0 or frames <= 0:
            raise VaememError(f"--tile and --frames must be positive, got {tile} and {frames}")
        old, new = _coefficient_file(old), _coefficient_file(new)
        a, b = read_coefficients(old), read_coefficients(new)
        sizes = [parse_res(r) for r in res]
        ka, kb = _priced_keys(a), _priced_keys(b)
        refused: dict[str, str] = {}

        def price(doc: dict, key: dict, w: int, h: int) -> str:
            model = key["architecture"]
            video = doc["models"].get(model, {}).get("temporal_factor") is not None
            try:
                sliced = key.get("slicing", False)  # a sliced batch of 2: one of 1 is the plain request
                e = est.explain(model, key["op"], w, h, dtype=key["dtype"], backend=key["conv_backend"],
                                allocator=key["allocator"], os=key["os"], tile=tile if key["tiled"] else None,
                                frames=frames if video else 1, batch=2 if sliced else 1, slicing=sliced,
                                attention=key.get("attention", "fused"), coefficients=doc)
            except ValueError as err:
                refused.setdefault(str(err), f"{est.group_id(key)} at {w}x{h}")
                return "n/a"
            priced.append(e.bytes)
            return str(math.ceil(e.bytes / MIB))  # as estimate prints it: a reservation rounds up

        priced: list[int] = []

        table = Table(Column("group", overflow="fold"), *[f"{w}x{h} before -> after MiB" for w, h in sizes],
                      title=f"{old} -> {new}")
        rows = [(gid, ka.get(gid) or kb[gid]) for gid in sorted(set(ka) | set(kb))]  # priced by both, as an app
        cells = [[f"{price(a, key, w, h)} -> {price(b, key, w, h)}" for w, h in sizes] for _, key in rows]
        if refused and not priced:  # a size no model runs (--res 513): a table of n/a is no comparison
            reason, where = next(iter(refused.items()))
            raise VaememError(f"neither file prices any group at {', '.join(res)}: every cell is n/a ({reason}, "
                              f"first at {where})")
        for (gid, _), row in zip(rows, cells):
            table.add_row(gid, *row)
        _console().print(table)
        for reason, where in refused.items():
            typer.echo(f"n/a: {reason} (first at {where})")
    except VaememError as e:
        _fail(e)


def _priced_keys(doc: dict) -> dict[str, dict]:
    """Group id -> key fields of every request ``diff`` prices in ``doc``: its measured groups, each architecture
    of each calibration on that calibration's platform, and each architecture of its kernel class it prices by
    transfer (one with a structure for that op, dtype and tiling): a refit that moves the class line or an
    architecture's line moves those too."""
    from vaemem import estimate as est

    keys = {g["group"]: {k: g[k] for k in est.GROUP_KEYS} for g in doc["groups"]}
    classes: dict[str, set[str]] = {}
    for m in doc["models"].values():
        classes.setdefault(m.get("kernel", "conv2d"), set()).add(m["architecture"])
    for c in doc.get("calibrations", []):
        moved = {a for a in classes.get(c["kernel"], ()) if c["op"] in doc["models"].get(a, {}).get("ops", est.OPS)
                 and est.structure_key(a, c["op"], c["dtype"], c["tiled"]) in doc.get("structures", {})}
        for arch in sorted(set(c["architectures"]) | moved):
            key = {"architecture": arch, **{k: c[k] for k in est.PLATFORM_KEYS}}
            keys.setdefault(est.group_id(key), key)
            # each variant measured here (schema 14): its lines price it, for every architecture on that path
            for v in sorted({est.variant_parts(k)[1] for k in c.get("variants", {})}):
                if "/math" in v and est.structure_key(arch, c["op"], c["dtype"], False, "math") not in \
                        doc.get("structures", {}):
                    continue  # no attention module, or no math-path structure: the plain request prices it
                keys.setdefault(est.group_id(key) + v, {**key, "attention": "math" if "/math" in v else "fused",
                                                         "slicing": "/sliced" in v})
    return keys


def _assumed_platform(dtype: str, backend: str | None, allocator: str | None, os_: str | None,
                      attention: str | None) -> tuple[str, str, str, str]:
    """The platform keys estimate was not given, and a line on stderr saying what it assumed. Only a missing
    backend imports torch (its detect_platform); the allocator and OS need the environment only. The attention
    path is detected with the backend, else fused."""
    from vaemem import estimate as est

    said = []
    if backend is None:
        import torch

        found = est.detect_platform(torch, dtype)
        backend = found["backend"]
        said.append(f"backend {backend} (detected: {found['device']})")
        if allocator is None and os_ is None:  # the host's allocator belongs to the host's OS
            allocator = found["allocator"]
            said.append(f"allocator {allocator} (detected)")
        if attention is None:
            attention = found["attention"]
            said.append(f"attention {attention} (detected)")

    if os_ is None:
        os_ = est.os_key()
        said.append(f"os {os_} (this machine)")
    if allocator is None:
        allocator = est.detect_allocator(backend, os=os_)
        said.append(f"allocator {allocator} (from this environment)")
    if said and attention is None:
        said.append("attention fused")
    if said:
        typer.echo("assumed " + ", ".join(said) + "; pass --backend/--allocator/--os/--attention to price another "
                   "platform", err=True)
    return backend, allocator, os_, attention or "fused"


@app.command(name="estimate")
def estimate_cmd(
    model: str = typer.Option(..., "--model", "-m", help="zoo model name (vaemem models lists them)"),
    op: str = typer.Option(..., help="decode or encode"),
    res: str = typer.Option(..., help="WIDTH or WIDTHxHEIGHT in pixels"),
    dtype: str = typer.Option(..., help="dtype the VAE runs in: fp16, bf16, fp32"),
    loaded_dtype: Optional[str] = typer.Option(None, help="dtype the weights were loaded in, when the VAE is cast "
                                               "to --dtype to run (adds the cast term): fp16, bf16, fp32"),
    cast: str = typer.Option("model", help="which weights were cast: model (the whole VAE) or op (only the half "
                             "the op runs)"),
    backend: Optional[str] = typer.Option(None, help="conv backend: cudnn, miopen, onednn, onednn-amx (half "
                                          "precision on a CPU with AMX), aten, mps, xpu (default: this machine's, "
                                          "detected through torch)"),
    allocator: Optional[str] = typer.Option(None, help="allocator: native, cudaMallocAsync, expandable, "
                                            "expandable-off, glibc, glibc-fixed, system (default: this process's)"),
    os_: Optional[str] = typer.Option(None, "--os", help="linux, windows, darwin (default: this machine's)"),
    batch: int = typer.Option(1, help="images (or clips) per call"),
    frames: int = typer.Option(1, help="frames of a clip (video models; each class has its rule, e.g. 1 + 4k)"),
    tile: Optional[int] = typer.Option(None, help="spatial tile side in px (diffusers' tiling, overlap 0.25)"),
    attention: Optional[str] = typer.Option(None, help="attention path: fused (an SDPA kernel) or math (no fused "
                                            "kernel: score matrices materialised); default: detected with the "
                                            "backend, else fused"),
    slicing: bool = typer.Option(False, "--slicing", help="diffusers' enable_slicing: a batch run one sample at "
                                 "a time"),
    budget: Optional[int] = typer.Option(None, help="whole MiB the app can reserve: also print the largest tile that "
                                           "fits (the spatial tile; a clip runs in time as its class does by "
                                           "default); exit status 1 where neither the request nor any tile fits"),
    coefficients: Optional[list[Path]] = typer.Option(None, help="coefficient file (default: the packaged one); "
                                                      "repeat to layer files, the first winning per group; "
                                                      "'packaged' names the packaged one (--coefficients "
                                                      "mine.json --coefficients packaged: yours over it)"),
    as_json: bool = typer.Option(False, "--json", help="print the estimate as JSON"),
) -> None:
    """Price one decode or encode from the coefficient file, in MiB, with the reasoning."""
    from vaemem import estimate as est
    from vaemem.measuring.point import parse_res

    try:
        w, h = parse_res(res)
        backend, allocator, os_, attention = _assumed_platform(dtype, backend, allocator, os_, attention)
        layers = [_coefficient_file(c) for c in coefficients or []]  # packaged: the shipped file, whatever
        # $VAEMEM_COEFFICIENTS says (it sets the default, which no --coefficients takes)
        coef: Any = None if not layers else layers[0] if len(layers) == 1 else layers
        kw = dict(dtype=dtype, loaded_dtype=loaded_dtype, backend=backend, allocator=allocator, os=os_, batch=batch,
                  frames=frames, cast=cast, attention=attention, slicing=slicing, coefficients=coef)
        fit = None
        if budget is not None:
            # whole MiB: a price rounded up to MiB, as printed, fits exactly where its bytes do
            if budget <= 0:
                raise VaememError(f"--budget must be a positive number of MiB, got {budget}")
            fit = est.largest_tile(model, op, w, h, budget * MIB, **kw)
        # where diffusers cannot run the request untiled, a budget still prices its tiles
        e = None if tile is None and fit is not None and fit["untiled_refused"] else \
            est.explain(model, op, w, h, tile=tile, **kw)
    except ValueError as err:
        _fail(VaememError(str(err)))
    except VaememError as err:
        _fail(err)
    if as_json:
        # the request as priced beside the price, so a script that collects several can tell them apart
        request = {"model": model, "op": op, "width": w, "height": h, "batch": batch, "frames": frames, "tile": tile,
                   "dtype": dtype, "loaded_dtype": loaded_dtype, "cast": cast, "slicing": slicing}
        typer.echo(json.dumps({"schema_version": ESTIMATE_SCHEMA_VERSION, **(e.to_dict() if e else {}),
                               "request": request, "platform": {"backend": backend, "allocator": allocator,
                                                                "os": os_, "attention": attention},
                               **({"budget": {"budget_bytes": budget * MIB, **fit}} if fit is not None else {})},
                              indent=1, sort_keys=True))
        _exit_unless_fits(fit)
        return
    # the request as priced, and the reservation rounded up (an app reading the text must not reserve less)
    request = f"{w}x{h}" + (f" x {frames} frames" if frames > 1 else "") + (f", batch {batch}" if batch > 1 else "") \
        + (f", {tile} px tiles" if tile else "")
    if e is None:
        typer.echo(f"{model} {op} {request} {dtype} cannot run untiled: {fit['untiled_refused']}")  # type: ignore[index]
    else:
        typer.echo(f"{math.ceil(e.bytes / MIB)} MiB for {model} {op} {request} {dtype} ({e.source}: {e.reason})")
        # where the fallback took it, or it raised a pixel line
        floor = f", legacy floor {e.floor_bytes / MIB:.0f} MiB" if e.floor_bytes else ""
        x = e.extrapolation  # the reason's words for it: "just" within 1 %
        past = "" if x is None or x <= 1 else \
            f", {'just' if x < 1.01 else f'{x:.3g}x'} past its largest measured point"
        typer.echo(f"  group {e.group or '-'}; envelope {math.ceil(e.envelope_bytes / MIB)} MiB, cast "
                   f"{e.cast_bytes / MIB:.0f} MiB{floor}, {e.pixels:,} pixels{past}")
    if fit is not None:
        # rounded up as the reservation above: a price shown at the (whole-MiB) budget fits it, one above does not
        up = lambda b: math.ceil(b / MIB)  # noqa: E731
        untiled = "untiled refused" if fit["untiled_bytes"] is None else \
            f"untiled {up(fit['untiled_bytes'])} MiB {'fits' if fit['untiled_fits'] else 'does not fit'}"
        tiles = ", ".join(f"{t}: {up(b)}" for t, b in fit["priced"].items()) or "none smaller than the image"
        best = (f"largest tile that fits: {fit['tile']} px ({up(fit['tile_bytes'])} MiB)" if fit["tile"]
                else "no tile fits")
        typer.echo(f"budget {budget} MiB: {untiled}; " + (f"tiled refused: {fit['tiled_refused']}"
                   if fit["tiled_refused"] else f"{best} (tiles priced, MiB: {tiles}; spatial tiling only)"))
    _exit_unless_fits(fit)


def _exit_unless_fits(fit: dict | None) -> None:
    """Exit status 1 where a budget was asked and neither the untiled request nor any tile fits it: a script
    asking "what fits?" must not read "nothing" as success (the answer itself is printed, as grep prints none)."""
    if fit is not None and not fit["untiled_fits"] and fit["tile"] is None:
        raise typer.Exit(1)


def _load_measurements(measurements: list[Path], skip_bad: bool) -> Any:
    """The measurements, malformed lines listed on stderr and skipped (with ``skip_bad``; else refused)."""
    from vaemem.fit.coefficients import load_dataset

    data = load_dataset(measurements, skip_bad=skip_bad)
    for bad in data.skipped:
        typer.echo(f"skipped {bad}", err=True)
    return data


def _coefficient_file(path: Path) -> Path:
    """A coefficient file argument: ``packaged`` names the packaged file, where no file of that name is in the
    working folder."""
    return DEFAULT_COEFFICIENTS if str(path) == "packaged" and not path.exists() else path


def _load_fit(measurements: list[Path], coefficients: Path, skip_bad: bool = False) -> tuple[Any, dict]:
    """The measurements (:func:`_load_measurements`) and a coefficient file that prices every model they hold."""
    from vaemem.fit.coefficients import read_coefficients

    coefficients = _coefficient_file(coefficients)
    data, coef = _load_measurements(measurements, skip_bad), read_coefficients(coefficients)
    lacking = sorted({p.point["model"] for _, pts in data.groups.values() for p in pts} - set(coef["models"]))
    if lacking:
        raise VaememError(f"{coefficients} holds no model {', '.join(lacking)} of the measurements: judge a file "
                          f"with the measurements it was fitted from (`vaemem fit --measurements ... --out FILE`)")
    return data, coef


@app.command()
def report(
    measurements: list[Path] = typer.Option([DEFAULT_MEASUREMENTS], "--measurements",
                                            show_default=SHOWN[DEFAULT_MEASUREMENTS], help="files or directories"),
    coefficients: Path = typer.Option(DEFAULT_COEFFICIENTS, show_default=SHOWN[DEFAULT_COEFFICIENTS],
                                      help="coefficient file to judge"),
    fmt: str = typer.Option("table", "--format", help="table, markdown or json"),
    plan_fit: Optional[Path] = typer.Option(None, "--plan-fit", help="also price every glibc-fixed point with "
                                            "this coefficient file, fitted from a plan's runs (vaemem plan)"),
    plan_measurements: Optional[Path] = typer.Option(None, "--plan-measurements", help="the plan's runs: its "
                                                     "points count as in-sample for --plan-fit"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help=SKIP_BAD_HELP),
) -> None:
    """Reservation / measured demand for the fitted coefficients (in-sample and held out), the legacy rule and
    ComfyUI's rule: per group and overall. With --plan-fit, a plan's calibration beside the full fit's."""
    from vaemem.report import accuracy, structural

    plan_text = ""
    try:
        if fmt not in ("table", "markdown", "json"):
            raise VaememError(f"unknown --format {fmt!r}; choose one of: table, markdown, json")
        if (plan_fit is None) != (plan_measurements is None):
            raise VaememError("--plan-fit and --plan-measurements go together")
        data, coef = _load_fit(measurements, coefficients, skip_bad)
        summary = accuracy.summarize(accuracy.point_ratios(data, coef))
        structure = structural.summary(data, coef)
        if plan_fit is not None:
            from vaemem.fit.coefficients import load_dataset, load_exceptions, read_coefficients
            from vaemem.report import plan as plan_report

            plan_data = load_dataset([plan_measurements])
            keys = {p.point_key for _, pts in plan_data.groups.values() for p in pts}
            compared = plan_report.compare(data, read_coefficients(plan_fit), coef, keys,
                                           load_exceptions(DEFAULT_EXCEPTIONS))
            structure["plan"] = compared
            plan_text = "\n" + plan_report.markdown(compared, f"A plan's fit ({plan_fit}, {plan_data.runs} runs) "
                                                            f"against the full fit ({data.runs} runs)")
    except VaememError as e:
        _fail(e)
    if fmt == "json":
        typer.echo(json.dumps({"schema_version": REPORT_SCHEMA_VERSION, **summary, "structural": structure},
                              indent=1, sort_keys=True))
    elif fmt == "markdown":
        head = ("## Pixel lines per group\n\nThe schema-1 rule (slope x pixels x frames + base), held out, for "
                "comparison; \"fitted\" is the file's own price where a group is still priced by its pixel line, "
                "and only there is the goal judged on it (a calibrated group's: held out by size, below).\n\n")
        typer.echo(head + accuracy.markdown(summary) + "\n" + structural.markdown(structure) + plan_text, nl=False)
    else:
        from vaemem.report.tables import markdown_renderables

        console = _console()
        console.print(accuracy.rich_table(summary))
        for part in markdown_renderables(structural.markdown(structure) + plan_text):
            console.print(part)


@app.command()
def plot(
    measurements: list[Path] = typer.Option([DEFAULT_MEASUREMENTS], "--measurements",
                                            show_default=SHOWN[DEFAULT_MEASUREMENTS], help="files or directories"),
    coefficients: Path = typer.Option(DEFAULT_COEFFICIENTS, show_default=SHOWN[DEFAULT_COEFFICIENTS],
                                      help="coefficient file"),
    out: Path = typer.Option(Path("fits/plots"), help="directory for the PNGs"),
    group: list[str] = typer.Option([], "--group", help="only these group ids (repeatable)"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help=SKIP_BAD_HELP),
) -> None:
    """One PNG per group: demand against megapixels, the fitted envelope, the legacy line and the ratios."""
    from vaemem.report.plot import plot_groups

    try:
        data, coef = _load_fit(measurements, coefficients, skip_bad)
        unknown = set(group) - set(data.groups)
        if unknown:
            raise VaememError(f"no such group: {', '.join(sorted(unknown))}")
        paths = plot_groups(data, coef, out, group or None)
    except VaememError as e:
        _fail(e)
    for p in paths:
        typer.echo(f"wrote {p}")


@app.command()
def export(
    python: Path = typer.Option(..., "--python", help="the module to write, e.g. vaemem_estimate.py"),
    coefficients: Path = typer.Option(DEFAULT_COEFFICIENTS, show_default=SHOWN[DEFAULT_COEFFICIENTS],
                                      help="coefficient file to embed (packaged: the packaged one)"),
) -> None:
    """Write the estimator as one self-contained Python module with the coefficients embedded as literals: an app
    vendors it and prices with nothing installed (byte-deterministic; it prices exactly what the package does)."""
    from vaemem import estimate as est
    from vaemem.export import python_module
    from vaemem.files import write_atomic

    try:
        coefficients = _coefficient_file(coefficients)
        try:
            doc = est.load(coefficients)
        except ValueError as e:
            raise VaememError(str(e)) from None
        write_atomic(python, python_module(doc, coefficients.name))
        typer.echo(f"wrote {python}: the estimator with {len(doc['groups'])} pixel-line groups, "
                   f"{len(doc.get('calibrations', []))} calibrations and {len(doc.get('structures', {}))} structures "
                   f"embedded")
    except VaememError as e:
        _fail(e)


@app.command(name="bench-conv3d")
def bench_conv3d(
    model: str = typer.Option("minimax-h3", "--model", "-m", help="minimax-h3, wan21, wan22, tiny-minimax-h3, tiny-wan"),
    conv3d: str = typer.Option("both", "--conv3d", help="native, decomposed, both, or auto (the path the declared "
                               "gate chooses, as vaemem.conv3d.apply applies it; VAEMEM_CONV3D overrides)"),
    method: Optional[str] = typer.Option(None, help="decomposition: taps (one conv2d per temporal tap, the "
                                         "default) or stacked", show_default=False),
    frames: int = typer.Option(17, help="frames in the chunk (1 + 4k)"),
    res: str = typer.Option("768x448", help="WIDTHxHEIGHT of the frames"),
    tiles: str = typer.Option("1x1", help="RxC: encode the frame as R x C spatial tiles"),
    dtype: str = typer.Option("fp32", help="fp32, fp16-autocast or bf16-autocast"),
    runs: int = typer.Option(3, help="chunks per path: the first is warm-up, the rest give the steady state (and "
                             "the speedup: with 1, the first call's ratio only)"),
    device: str = typer.Option("cpu", help="cpu, cuda, cuda:N"),
    rig: Optional[str] = typer.Option(None, help="rig name (default <hostname>-<device type>)"),
    out: Optional[Path] = typer.Option(None, help="JSON Lines file (default measurements/conv3d/<rig>.jsonl)"),
    launcher: Optional[str] = typer.Option(None, help="fork (default on Linux) or spawn"),
    as_json: bool = typer.Option(False, "--json", help="print the records as JSON"),
) -> None:
    """Time native conv3d against its conv2d decomposition on a causal video encoder, each in a fresh process."""
    from vaemem.conv3d import bench as b
    from vaemem.measuring.plumbing.launcher import default_launcher
    from vaemem.measuring.point import parse_res
    from vaemem.measuring.child.rig import rig_name as resolve_rig_name

    out_path, start = out, 0
    try:
        w, h = parse_res(res)
        rc = tiles.lower().split("x")
        if len(rc) != 2 or not all(v.isdigit() for v in rc):
            raise VaememError(f"bad --tiles {tiles!r}: write RxC, e.g. 1x2")
        rig_name = resolve_rig_name(rig, device)
        out_path = out or Path("measurements/conv3d") / f"{rig_name}.jsonl"
        start = _lines(out_path)
        records = b.bench(model, conv3d, method=method, frames=frames, width=w, height=h,
                          tiles=(int(rc[0]), int(rc[1])), dtype=dtype, runs=runs, device=device, out=out_path,
                          rig=rig_name, launcher=launcher or default_launcher())
    except VaememError as e:
        _fail(e)
    except KeyboardInterrupt:  # the records are appended once every path has run, one at a time: the file says
        _interrupted(f"{_count(_lines(out_path) - start, 'record')} kept in {out_path}" if out_path is not None
                     else "nothing recorded")
    if as_json:
        typer.echo(json.dumps(records, indent=1, sort_keys=True))
    else:
        _console().print(b.table(records))


def main() -> None:
    """Console entry point."""
    try:
        app()
    except VaememError as e:  # errors raised outside a command body (e.g. while parsing)
        typer.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except OSError as e:  # the output could not be written (a full disk, a closed pipe): one line, not a traceback
        try:  # and no second failure when the interpreter flushes stdout on exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        sys.stderr.write(f"error: {e.strerror or e}" + (f": {e.filename}" if e.filename else "") + "\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
