"""Disaggregated prefill and decode (xPyD): prefill instances compute prompts, decode
instances generate, the KV cache of each prompt crosses from one to the other.

The behaviour modelled (DistServe, Zhong et al., OSDI 2024, sections 3-4: prefill and decode
instances sized and placed apart, goodput per GPU under TTFT and TPOT SLOs as the objective;
Splitwise, Patel et al., ISCA 2024: the KV cache sent per request after its prompt, layer by
layer, then decoded on the token machine; Dynamo's disaggregated serving, wxsms/dynamo@80e7bafd
`docs/design_docs/router_design.md`: a request routed to a prefill worker, its KV blocks pulled
by a decode worker):

1. A request arrives at a prefill instance (the router over the prefill pools), whose engine
   runs its prompt like any other (chunked, batched with other prompts) and samples the first
   token: the time to first token ends there.
2. When its prompt is done, the router picks a decode instance (over the decode pools, at that
   time). The KV cache of the prompt (every layer, K and V) goes from the prefill instance's
   devices to the decode instance's, every device pair at once, timed by `transfer.send_s`
   over the node's links when both sit in one node of one system, else over the network.
   Transfers out of one prefill instance go one after another (they share its links).
3. When the KV has arrived the decode instance admits the request as soon as it has the KV
   blocks for the prompt and one more token and fewer than max_num_seqs running (first come
   first served among arrived requests; vLLM's scheduler takes a request whose remote KV has
   landed like one whose prefix is cached); it then decodes the rest of the output under its
   own scheduler, preemption included.

Not modelled: the prefill instance keeps the KV blocks until the transfer ends (here it frees
them when the prompt is done) and layer-wise overlap of the transfer with the prompt's compute
(Splitwise); the transfer starts when the prompt ends. The decode engines are vLLM's (V1 or V0).

`pd_search` replays every split of N instances into P prefill and N - P decode instances and
reports each split's capacity under the SLOs (the largest rate meeting them,
`capacity.find_capacity`) per device and per dollar-hour, next to N aggregated replicas.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..models import ModelConfig
from ..simulator.memory import kv_cache_bytes
from .capacity import Capacity, find_capacity
from .cluster import (
    PoolSpec,
    Replica,
    build_pools,
    build_replicas,
    cluster_report,
    dispatch,
    placements,
    pools_network,
    serve_cluster,
    start_replay,
)
from .replay import ServeError, _rows
from .report import ServeReport
from .routing import Router
from .traces import Trace, scale_rate
from .transfer import Network, link_between, send_s
from .vllm_v1 import Seq

DECODE_SCHEDULERS = ("vllm-v1", "vllm-v0")


def kv_transfer_bytes_per_device(config: ModelConfig, tokens: int, kv_dtype: str,
                                 prefill: PoolSpec, decode: PoolSpec) -> float:
    """Bytes each sending device puts on its links for a prompt of `tokens` tokens: the whole
    KV (every TP shard's, every stage's) spread over the device pairs that move it at once
    (the smaller instance's device count)."""
    whole = kv_cache_bytes(config, prefill.tp, 1, tokens, kv_dtype) * prefill.tp
    return whole / min(prefill.tp * prefill.pp, decode.tp * decode.pp)


class _Decoder:
    """A decode replica with its arrived-but-not-admitted requests (first come first served)."""

    def __init__(self, replica: Replica):
        self.replica = replica
        self.pending: deque[Seq] = deque()

    def admit(self) -> None:
        """Admit pending requests while the first fits (its KV blocks and a sequence slot)."""
        while self.pending:
            s = self.pending[0]
            e = self.replica.engine_for()
            bs = e.opt.block_size
            need = -(-(s.prompt + 1) // bs)
            if len(e.running) >= e.opt.max_num_seqs or not e.pool.take(need):
                return
            self.pending.popleft()
            s.private, s.shared, s.computed, s.generated = need, [], s.prompt, 1
            s.next_id = len(s.ids)
            s.first_scheduled_s = e.now
            e.running.append(s)

    def advance(self, until: float) -> None:
        """Run the replica to `until`, admitting pending requests between its steps."""
        self.admit()
        while self.pending:
            engines = self.replica.engines
            now = min(e.now for e in engines)
            if now >= until:
                return
            busy = [e for e in engines if e.running or e.waiting]
            if not busy:  # idle with requests it cannot take: they can never fit
                raise ServeError(f"decode replica {self.replica.index} cannot admit a request "
                                 f"of {self.pending[0].prompt} prompt tokens")
            e = min(busy, key=lambda x: x.now)
            e.advance(e.now + 1e-12)  # one step (or window) of the engine
            self.admit()
        self.replica.advance(until)
        self.admit()

    # the router's view of a decode replica
    @property
    def index(self) -> int:
        return self.replica.index

    @property
    def outstanding(self) -> int:
        return self.replica.outstanding + len(self.pending)

    def outstanding_tokens(self) -> int:
        return self.replica.outstanding_tokens() + sum(s.output - 1 for s in self.pending)

    def cached_tokens(self, request) -> int:
        return 0


def serve_disaggregated(trace: Trace, model: ModelConfig | Callable[[int], ModelConfig],
                        prefill: Sequence[PoolSpec], decode: Sequence[PoolSpec], *,
                        software: str = "vllm", router: str = "round-robin",
                        overrides: dict | None = None, scheduler: str | None = None,
                        dtype: str = "fp16", model_name: str = "model",
                        slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                        skip_long: bool = False, network: Network | None = None,
                        progress: Callable[[int, int], None] | None = None,
                        engine_version: str | None = None) -> ServeReport:
    """Replay `trace` through prefill pools and decode pools (the module docstring;
    `engine_version`: the server's, for the vllm-dp balancer)."""
    started = start_replay(router, slo_ttft_s, slo_tpot_s)
    network = network or pools_network(list(prefill) + list(decode))
    common = {"software": software, "scheduler": scheduler, "overrides": overrides or {},
              "dtype": dtype, "model_name": model_name, "skip_long": skip_long,
              "network": network}
    p_built, trace = build_pools(prefill, trace, model, **common)
    d_built, trace = build_pools(decode, trace, model, **{**common, "skip_long": False})
    for p in d_built:
        if p.kind not in DECODE_SCHEDULERS:
            raise ServeError("disaggregated decode runs vLLM's scheduler (" +
                             ", ".join(DECODE_SCHEDULERS) + f"), not {p.kind}; use "
                             "--software vllm")
    nodes = placements(p_built + d_built)
    p_reps = build_replicas(p_built, trace, 0, nodes[:sum(p.spec.count for p in p_built)])
    d_reps = build_replicas(d_built, trace, len(p_reps), nodes[len(p_reps):])
    decoders = [_Decoder(r) for r in d_reps]
    # 1. prompts on the prefill side (it does not wait for the decode side)
    pre_seqs = dispatch(p_reps, trace, router, progress, prefill_only=True,
                        engine_version=engine_version)
    total = len(trace.requests)
    # 2-3. transfers and decode admission, in time order
    kv_dtype = p_built[0].sim.precision("kv_cache")
    config = p_built[0].config if p_built[0].spec.pp == 1 else \
        (model(p_built[0].spec.tp) if callable(model) else model)
    link_free = [0.0] * len(p_reps)
    events = [(s.first_token_s, 0, i) for i, s in enumerate(pre_seqs)
              if trace.requests[i].output_tokens > 1]
    heapq.heapify(events)
    dec_seqs: dict[int, Seq] = {}
    transfer = [0.0] * total
    ready = [math.nan] * total
    chosen = [-1] * total
    route = Router(decoders, router, engine_version)
    while events:
        t, kind, i = heapq.heappop(events)
        req, pre = trace.requests[i], pre_seqs[i]
        if kind == 0:  # the prompt is done: pick the decode replica, start the transfer
            for d in decoders:
                d.advance(t)
            d = route.choose(replace(req, arrival_s=t, hash_ids=()), i)
            chosen[i] = decoders.index(d)
            src, dst = p_reps[pre.replica], d.replica
            ps, ds = p_built[src.pool], d_built[dst.pool]
            link = link_between(ps.system, src.node, ds.system, dst.node, network)
            transfer[i] = send_s(kv_transfer_bytes_per_device(
                config, req.prompt_tokens, kv_dtype, ps.spec, ds.spec), link)
            begin = max(t, link_free[pre.replica])
            link_free[pre.replica] = ready[i] = begin + transfer[i]
            heapq.heappush(events, (ready[i], 1, i))
        else:  # the KV has landed: the decode replica admits it when it can
            d = decoders[chosen[i]]
            d.advance(t)
            s = Seq(req, d.index)
            s.first_token_s = s.last_token_s = pre.first_token_s
            s.cached_tokens = pre.cached_tokens
            d.pending.append(s)
            d.admit()
            dec_seqs[i] = s
    for d in decoders:
        d.advance(math.inf)
    rows = _rows(pre_seqs)[0]  # the prefill side's rows, completed with the decode side's
    for i, (pre, row) in enumerate(zip(pre_seqs, rows)):
        s = dec_seqs.get(i)
        if s is not None:
            row.update(finish_s=s.finish_s, e2e_s=s.finish_s - row["arrival_s"],
                       tpot_s=(s.finish_s - s.first_token_s) / (s.output - 1),
                       output_tokens=s.output, preemptions=pre.preemptions + s.preemptions)
        row.update(decode_replica=-1 if s is None else s.replica, kv_transfer_s=transfer[i],
                   kv_ready_s=ready[i],
                   decode_admitted_s=math.nan if s is None else s.first_scheduled_s)
    n_pre = sum(p.devices for p in p_built)
    extra = {"disaggregated": {
        "prefill": [p.spec.label for p in p_built], "decode": [p.spec.label for p in d_built],
        "prefill_devices": n_pre, "decode_devices": sum(p.devices for p in d_built),
        "network_gbps": network.gbps,
        "kv_transfer_mean_s": sum(transfer) / max(1, sum(1 for x in transfer if x))}}
    return cluster_report(trace, p_built + d_built, p_reps + d_reps, rows,
                          pre_seqs + list(dec_seqs.values()),
                          router=router, model_name=model_name, dtype=dtype,
                          slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, started=started,
                          extra_setup={**extra, "network": network.describe()})


@dataclass
class PDSearch:
    """Capacity under the SLOs of every P:D split of N instances, and of N aggregated ones."""
    instance: str
    percentile: int
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    rows: list[dict] = field(default_factory=list)
    network: dict | None = None  # the network every split's KV transfers used (Network.describe)

    def to_table(self) -> list:
        from ..console import table_of

        p = self.percentile
        t = table_of(f"P:D search, {self.instance} instances, p{p} TTFT <= {self.slo_ttft_s} s,"
                     f" TPOT <= {self.slo_tpot_s} s", (
                         "P:D", "devices", "capacity /s", "per device /s", "per $/h /s",
                         f"TTFT p{p} ms", f"TPOT p{p} ms", "KV transfer ms"))
        for r in self.rows:
            tpot = r["tpot_s"]
            t.add_row(r["split"], str(r["devices"]), _num(r["capacity_per_s"]),
                      _num(r["per_device_per_s"]), _num(r["per_usd_hour"]),
                      _ms(r["ttft_s"]), _ms(tpot), _ms(r["kv_transfer_mean_s"]))
        best = max(self.rows, key=lambda r: r["per_device_per_s"] or 0.0)
        items = [t, f"best goodput per device: {best['split']}"]
        if self.network is not None:
            n = self.network
            items.append(f"network between nodes: {n['gbps']:g} Gb/s per device and direction, "
                         f"{n['latency_s'] * 1e6:g} us (bandwidth from {n['source']}, latency "
                         f"from {n['latency_source']})")
        return items

    def to_json(self) -> dict:
        return {"instance": self.instance, "percentile": self.percentile,
                "slo_ttft_s": self.slo_ttft_s, "slo_tpot_s": self.slo_tpot_s,
                "network": self.network, "rows": self.rows}


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f}"


def pd_search(trace: Trace, model: ModelConfig | Callable[[int], ModelConfig],
              instance: PoolSpec, instances: int, *, percentile: int = 99,
              slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
              progress: Callable[[str], None] | None = None, **options) -> PDSearch:
    """Every split P:(N - P) of `instances` copies of `instance`, P = 1..N-1, plus N aggregated
    replicas ("agg"): the capacity under the SLOs (`find_capacity`, warm from the trace's own
    rate) per device and per dollar-hour of the devices."""
    if instances < 2:
        raise ServeError(f"--pd-search {instances}: a P:D split needs at least 2 instances")
    one = replace(instance, count=1)
    # one network for every split, resolved once (and its default said once)
    options["network"] = options.get("network") or pools_network([one])
    out = PDSearch(one.label.rsplit(":", 1)[0], percentile, slo_ttft_s, slo_tpot_s,
                   network=options["network"].describe())
    splits: list[tuple[str, Callable[[Trace], ServeReport]]] = [
        ("agg", lambda tr: serve_cluster(tr, model, [replace(one, count=instances)],
                                         slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s,
                                         **options))]
    for p in range(1, instances):
        splits.append((f"{p}:{instances - p}", lambda tr, p=p: serve_disaggregated(
            tr, model, [replace(one, count=p)], [replace(one, count=instances - p)],
            slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, **options)))
    for name, run in splits:
        if progress is not None:
            progress(name)
        try:
            cap: Capacity | None = find_capacity(
                lambda scale, run=run: run(scale_rate(trace, scale)), trace.rate_per_s(),
                slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, percentile=percentile)
        except ServeError as e:
            if "no request rate meets" not in str(e):
                raise
            cap = None
        report = cap.report if cap else None
        s = report.summary if report else None
        devices = report.setup["devices"] if report else one.tp * one.pp * instances
        usd_hour = s["cost"]["usd"] / s["makespan_s"] * 3600 if s else None
        key = f"p{percentile}"
        out.rows.append({
            "split": name, "devices": devices,
            "capacity_per_s": cap.rate_per_s if cap else 0.0,
            "per_device_per_s": cap.rate_per_s / devices if cap else 0.0,
            "per_usd_hour": cap.rate_per_s / usd_hour if cap and usd_hour else 0.0,
            "ttft_s": s["ttft_s"][key] if s else None, "tpot_s": s["tpot_s"][key] if s else None,
            "kv_transfer_mean_s": report.setup.get("disaggregated", {}).get(
                "kv_transfer_mean_s") if report else None})
    return out
