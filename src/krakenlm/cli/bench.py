"""`krakenlm bench ...`: measurements. `bench tp`: sharded inference on several processes."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from . import app
from ..console import stderr_console, stdout_console

bench_app = typer.Typer(help="Benchmarks (timings on this machine).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _ints(text: str, flag: str) -> tuple[int, ...]:
    from ..errors import KrakenError

    try:
        return tuple(int(part) for part in _csv(text))
    except ValueError:
        raise KrakenError(f"{flag} takes comma-separated integers, got {text!r}") from None


@bench_app.command("tp")
def bench_tp(
    world_size: int = typer.Option(None, "--world-size", help="Processes to spawn here [default: 2]; under torchrun, torchrun's."),
    sizes: str = typer.Option("125m", "--sizes", help="Model sizes, comma-separated: tiny, 125m, 350m, 760m."),
    archs: str = typer.Option("gpt,parallel,kraken", "--arch", help="Architectures, comma-separated."),
    prompt_tokens: str = typer.Option(None, "--prompt-tokens", help="Prompt lengths, comma-separated, at most the model's context [default: 128,512,1024, those within the context]."),
    new_tokens: int = typer.Option(9, "--new-tokens", help="Tokens generated per run (TPOT averages all after the first)."),
    warmup: int = typer.Option(1, "--warmup", help="Untimed runs before the timed ones."),
    repeats: int = typer.Option(3, "--repeats", help="Timed runs; the median is reported."),
    comm: str = typer.Option("both", "--comm", help="on: real collectives; off: local no-ops; both: measure both and report the exposed communication."),
    out: Path = typer.Option(Path("runs/bench-tp"), "--out", help="Directory for rows.json and ttft.png."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON on stdout."),
    timeout_s: float = typer.Option(300.0, "--timeout", help="Seconds to wait for a peer rank (rendezvous and each collective)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random prompts."),
    comm_backend: str = typer.Option("auto", "--comm-backend", help="All-reduces through auto (shared memory on CPU when all ranks are on this host, else gloo/NCCL), shm, gloo or nccl; several, comma-separated (shm,gloo), are compared in interleaved runs."),
    vocab_parallel_head: bool = typer.Option(False, "--vocab-parallel-head", help="Each rank computes 1/N of the vocabulary's logits (one more collective per forward pass)."),
) -> None:
    """TTFT, TPOT and exposed communication of gpt / parallel / kraken at matched sizes."""
    from ..distributed.bench import BenchPlan, bench_rank, default_prompt_tokens, save_ttft_plot
    from ..distributed.launch import resolve_world_size, run_ranks

    plan = BenchPlan(world_size=resolve_world_size(world_size, default=2), sizes=_csv(sizes), archs=_csv(archs),
                     prompt_tokens=(default_prompt_tokens(_csv(sizes)) if prompt_tokens is None
                                    else _ints(prompt_tokens, "--prompt-tokens")),
                     new_tokens=new_tokens,
                     warmup=warmup, repeats=repeats, comm=comm, seed=seed,
                     comm_backends=_csv(comm_backend), vocab_parallel_head=vocab_parallel_head)
    plan.validate()
    results = run_ranks(bench_rank, (plan,), world_size=plan.world_size, timeout_s=timeout_s,
                        comm_backend=plan.launch_backend)
    if 0 not in results:
        return  # another torchrun rank: rank 0 reports
    rows = results[0]
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.json").write_text(json.dumps(rows, indent=2) + "\n")
    save_ttft_plot(rows, out / "ttft.png")
    stderr_console().print(f"wrote {out / 'rows.json'} and {out / 'ttft.png'}")
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    _print_table(rows)


def _print_table(rows: list[dict]) -> None:
    from rich.table import Table

    def ms(value):
        return "n/a" if value is None else f"{1000 * value:.1f}"

    table = Table(title=f"bench tp, world size {rows[0]['world_size']} (times in ms, medians)")
    for column in ("preset", "prompt", "all-reduce", "TTFT", "TPOT", "exposed comm",
                   "TTFT comm off", "blocked in comm", "exposed if blocking"):
        table.add_column(column, justify="left" if column == "preset" else "right", no_wrap=True)
    for r in rows:
        table.add_row(r["preset"], str(r["prompt_tokens"]), r["comm_backend"] or "off",
                      ms(r["ttft_s"]), ms(r["tpot_s"]),
                      ms(r["exposed_comm_s"]), ms(r["ttft_comm_off_s"]),
                      ms(r["prefill_comm_blocked_s"]), ms(r["exposed_comm_if_blocking_s"]))
    console = stdout_console()
    console.print(table)
    noisy = sum(1 for r in rows if (r.get("exposed_comm_raw_s") or 0.0) < 0)
    if noisy:
        console.print(f"exposed comm 0.0 in {noisy} rows: there the runs with communication were "
                      "the faster ones (noise above the communication time; the measured "
                      "medians are exposed_comm_raw_s in rows.json)")


@app.command("demo-tp")
def demo_tp(
    world_size: int = typer.Option(2, "--world-size", help="Processes to spawn."),
    kraken_checkpoint: Path = typer.Option(None, "--kraken-checkpoint", help="A trained Kraken checkpoint [default: random tiny weights]."),
    gpt_checkpoint: Path = typer.Option(None, "--gpt-checkpoint", help="A trained GPT checkpoint [default: random tiny weights]."),
    new_tokens: int = typer.Option(24, "--new-tokens", help="Greedy tokens to generate."),
) -> None:
    """Check that Kraken and GPT give the single-device tokens on N processes; print TTFTs."""
    from ..distributed.demo import run_tp_demo

    checkpoints = {arch: path for arch, path in (("kraken", kraken_checkpoint),
                                                 ("gpt", gpt_checkpoint)) if path is not None}
    report = run_tp_demo(checkpoints, world_size=world_size, new_tokens=new_tokens)
    print(report.text())
    if not report.ok:
        raise typer.Exit(1)
