"""Read result files, summarise them, plot them, and gate EAGLE-3 against the baseline."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, TypeAdapter, ValidationError, model_validator

from ..errors import shown
from ..files import TOO_DEEP, loads_json
from ..judging import findings
from ..judging.findings import Finding, Judged, Status
from ..serving.settings import describe
from . import BenchError
from .client import inter_token_latencies_ms

OK, FAIL = Status.OK, Status.FAIL

METRICS = {  # record field -> (label, unit, scale for display)
    "decode_tok_s": ("decode", "tok/s", 1.0),
    "ttft_s": ("TTFT", "ms", 1000.0),
    "e2e_s": ("end-to-end", "s", 1.0),
    "output_tokens": ("output", "tokens", 1.0),
    "spec_accept_length": ("accept length", "tokens", 1.0),
}


def reference() -> dict:
    """The users' measured numbers on 8x RTX PRO 6000 (shipped as data)."""
    return json.loads(resources.files(__package__).joinpath("reference.json").read_text())


# The records a results file holds, as runner.py writes them; what summaries, plots and the
# gate read is checked on load, so a hand-edited or foreign file is reported by line.
class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


Number = float | None


class RunRecord(_Record):
    type: Literal["run"]
    label: str = "run"
    run: str | None = None  # the run's identity; every record of the run carries it (older files: none)


class RequestRecord(_Record):
    type: Literal["request"]
    label: str
    concurrency: StrictInt = Field(ge=1)
    ok: StrictBool
    decode_tok_s: Number = None
    ttft_s: Number = None
    e2e_s: Number = None
    output_tokens: StrictInt | None = None
    spec_accept_length: Number = None
    chunk_times_us: list[StrictInt] = []
    chunk_tokens: list[StrictInt] = []

    @model_validator(mode="after")
    def _chunks(self) -> RequestRecord:
        if len(self.chunk_times_us) != len(self.chunk_tokens):
            raise ValueError("chunk_times_us and chunk_tokens differ in length")
        return self


class ServerInfoRecord(_Record):
    type: Literal["server_info"]
    label: str
    avg_spec_accept_length: Number = None


class ServerMetricsRecord(_Record):
    type: Literal["server_metrics"]
    label: str


class LevelRecord(_Record):
    """One concurrency level: the tokens all its measured requests got over its wall time."""

    type: Literal["level"]
    label: str
    concurrency: StrictInt = Field(ge=1)
    requests: StrictInt = Field(ge=0)
    output_tokens: StrictInt = Field(ge=0)
    wall_s: float = Field(gt=0)


RECORD = TypeAdapter(
    Annotated[
        RunRecord | RequestRecord | LevelRecord | ServerInfoRecord | ServerMetricsRecord, Field(discriminator="type")
    ]
)


def load(path: Path) -> list[dict]:
    """Records of a results file. A torn last line (a crash mid-write) is skipped; other bad lines are errors."""
    if path.exists() and not path.is_file():  # a directory, FIFO or device
        raise BenchError(f"{path} is not a results file (not a regular file)")
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise BenchError(f"cannot read results file {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise BenchError(f"{path} is not a sglang-eagle3 results file (not UTF-8 text)") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = loads_json(line)
        except json.JSONDecodeError as err:
            if number == len(lines) and err.msg != TOO_DEEP:
                continue  # torn final line
            raise BenchError(f"{path}:{number} is not a JSON record; is this a sglang-eagle3 results file?") from None
        if not isinstance(record, dict) or "type" not in record:
            raise BenchError(f"{path}:{number} is not a sglang-eagle3 result record (no 'type')")
        try:
            record = RECORD.validate_python(record).model_dump()
        except ValidationError as err:
            problem = describe(err).removeprefix("invalid settings:").strip()
            raise BenchError(f"{path}:{number} is not a valid result record: {problem}") from None
        records.append(record)
    if not any(r["type"] == "run" for r in records):
        raise BenchError(f"{path} has no 'run' record; is this a sglang-eagle3 results file?")
    return records


def runs(records: list[dict]) -> dict[str, list[dict]]:
    """A results file's records by run, in the order the runs started (``bench run`` appends). In a file written
    before runs had ids, each "run" record starts the next, named #1, #2, ..."""
    found: dict[str, list[dict]] = {}
    current, count = "#1", 0
    for r in records:
        if r["type"] == "run" and not r.get("run"):
            count += 1
            current = f"#{count}"
        found.setdefault(r.get("run") or current, []).append(r)
    return found


def _run_line(run_id: str, rs: list[dict]) -> str:
    head = next((r for r in rs if r["type"] == "run"), {})
    requests = sum(r["type"] == "request" for r in rs)
    return f"{run_id} (label {shown(head.get('label', '?'))}, {requests} requests, started {head.get('started', '?')})"


def select_run(records: list[dict], name: str | None, source: str, option: str) -> list[dict]:
    """The records of one run of a results file: the run ``name`` names (its id, or a label no other run has), or
    the file's only run. A file of several runs and no name is refused: which one to judge is the user's to say."""
    found = runs(records)
    listing = "; ".join(_run_line(run_id, rs) for run_id, rs in found.items())
    if name is not None:
        if name in found:
            return found[name]
        labelled = [run_id for run_id, rs in found.items() if rs[0].get("label") == name]
        if len(labelled) == 1:
            return found[labelled[0]]
        several = ", a label several runs have" if labelled else ""
        raise BenchError(f"{source} has no run {shown(name)}{several}; give {option} one of its runs: {listing}")
    if len(found) == 1:
        return next(iter(found.values()))
    raise BenchError(
        f"{source} holds {len(found)} runs (bench run appends to its --output); name the one to judge with {option} "
        f"RUN, its id or a label no other run has: {listing}"
    )


def labelled(records: list[dict]) -> list[dict]:
    """The records with each run's label made unique: a label two runs share becomes "label (run id)", so a
    summary or plot of a file of several runs never pools them."""
    found = runs(records)
    seen: dict[str, int] = {}
    for rs in found.values():
        label = rs[0].get("label")
        seen[label] = seen.get(label, 0) + 1
    out = []
    for run_id, rs in found.items():
        rename = seen[rs[0].get("label")] > 1
        out += [{**r, "label": f"{r['label']} ({run_id})"} if rename and "label" in r else r for r in rs]
    return out


def quantiles(values: list[float]) -> tuple[float, float, float]:
    """(p10, median, p90)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return deciles[0], statistics.median(values), deciles[8]


@dataclass
class Group:
    label: str
    concurrency: int
    ok: int = 0
    failed: int = 0
    stats: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    itl_ms: tuple[float, float, float] | None = None
    avg_spec_accept_length: float | None = None
    aggregate_tok_s: float | None = None  # all finished requests' tokens over the level's wall time


def aggregate_tok_s(level: dict) -> float | None:
    return level["output_tokens"] / level["wall_s"] if level.get("wall_s") else None


def summarize(records: list[dict]) -> list[Group]:
    records = labelled(records)
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        if r["type"] == "request":
            groups.setdefault((r["label"], r["concurrency"]), []).append(r)
    server_accept = {r["label"]: r.get("avg_spec_accept_length") for r in records if r["type"] == "server_info"}
    levels = {(r["label"], r["concurrency"]): aggregate_tok_s(r) for r in records if r["type"] == "level"}
    out = []
    for (label, concurrency), rs in sorted(groups.items()):
        ok = [r for r in rs if r.get("ok")]
        group = Group(label, concurrency, ok=len(ok), failed=len(rs) - len(ok))
        for metric in METRICS:
            values = [r[metric] for r in ok if isinstance(r.get(metric), (int, float))]
            if values:
                group.stats[metric] = quantiles(values)
        itl = [x for r in ok for x in inter_token_latencies_ms(r["chunk_times_us"], r["chunk_tokens"])]
        if itl:
            group.itl_ms = quantiles(itl)
        group.avg_spec_accept_length = server_accept.get(label)
        group.aggregate_tok_s = levels.get((label, concurrency))
        out.append(group)
    return out


def render_summary(groups: list[Group]) -> str:
    if not groups:
        return "no finished requests"
    lines = [
        f"{'label':<12} {'conc':>4} {'ok':>4} {'fail':>4}  {'decode tok/s p10/med/p90':>27}  "
        f"{'TTFT ms med':>11}  {'ITL ms med':>10}  {'accept len':>10}  {'aggregate tok/s':>15}"
    ]
    for g in groups:
        d = g.stats.get("decode_tok_s")
        ttft = g.stats.get("ttft_s")
        accept = g.stats.get("spec_accept_length")
        accept_value = accept[1] if accept else g.avg_spec_accept_length
        lines.append(
            f"{g.label:<12} {g.concurrency:>4} {g.ok:>4} {g.failed:>4}  "
            + (f"{d[0]:>8.1f} / {d[1]:>7.1f} / {d[2]:>7.1f}" if d else f"{'-':>27}")
            + f"  {ttft[1] * 1000 if ttft else float('nan'):>11.1f}"
            + f"  {g.itl_ms[1] if g.itl_ms else float('nan'):>10.2f}"
            + (f"  {accept_value:>10.2f}" if accept_value else f"  {'-':>10}")
            + (f"  {g.aggregate_tok_s:>15.1f}" if g.aggregate_tok_s else f"  {'-':>15}")
        )
    return "\n".join(lines)


def plot(records: list[dict], path: Path) -> Path:
    """PNG: decode tok/s (median, p10-p90) per concurrency and label; inter-token latency distribution."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = labelled(records)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = _decode_throughput(left, summarize(records))
    for label in labels:
        itl = [x for r in records if r["type"] == "request" and r["label"] == label and r.get("ok")
               for x in inter_token_latencies_ms(r["chunk_times_us"], r["chunk_tokens"])]  # fmt: skip
        if itl:
            right.hist(itl, bins=50, alpha=0.6, label=label)
    right.set(xlabel="inter-token latency (ms)", ylabel="tokens", title="Inter-token latency")
    if right.has_data():
        right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _decode_throughput(ax, groups: list[Group]) -> list[str]:
    """Each label's median decode tok/s with p10-p90 bars, the users' figures and, on a second axis, the aggregate
    tok/s; the labels drawn (those with a decode rate)."""
    decoded = _by_label([g for g in groups if "decode_tok_s" in g.stats])
    for label, gs in decoded.items():
        stats = [g.stats["decode_tok_s"] for g in gs]
        low, high = [m - p10 for p10, m, _ in stats], [p90 - m for _, m, p90 in stats]
        ax.errorbar([g.concurrency for g in gs], [m for _, m, _ in stats], yerr=[low, high], marker="o", capsize=4,
                    label=label)  # fmt: skip
    for ref, style in zip(reference()["runs"], [":", "--", "-.", (0, (1, 3))], strict=False):
        ax.axhline(ref["tok_s"], linestyle=style, linewidth=0.8, color="grey",
                   label=f"users: {ref['tok_s']} ({ref['configuration'][:34]})")  # fmt: skip
    ax.set(xlabel="concurrency", ylabel="decode tok/s per request (median, p10-p90)", title="Decode throughput")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    aggregate = _by_label([g for g in groups if g.aggregate_tok_s])
    if aggregate:  # what all requests together got, e.g. from several servers behind a router
        total = ax.twinx()
        for label, gs in aggregate.items():
            total.plot([g.concurrency for g in gs], [g.aggregate_tok_s for g in gs], "s--", alpha=0.7,
                       label=f"{label}: aggregate")  # fmt: skip
        total.set_ylabel("aggregate tok/s (dashed)")
        total.legend(fontsize=7, loc="lower right")
    return list(decoded)


def _by_label(groups: list[Group]) -> dict[str, list[Group]]:
    return {label: [g for g in groups if g.label == label] for label in sorted({g.label for g in groups})}


GATE_LABELS = ("baseline", "EAGLE-3")  # the default A/B: speculation off, then on


@dataclass
class GateReport(Judged):
    baseline_tok_s: float
    eagle3_tok_s: float
    ratio: float
    threshold: float
    floor: float | None
    findings: list[Finding]  # speed-up, and floor when one is given
    # label -> what explains the speeds: accept length per request and the server's /metrics view
    acceptance: dict[str, dict] = field(default_factory=dict)
    labels: tuple[str, str] = GATE_LABELS  # side A (the reference), side B (gated against it)


def single_stream_median(records: list[dict], what: str) -> float:
    values = [r["decode_tok_s"] for r in records if r["type"] == "request" and r.get("ok") and r["concurrency"] == 1
              and isinstance(r.get("decode_tok_s"), (int, float))]  # fmt: skip
    if not values:
        raise BenchError(f"{what} has no finished single-stream (concurrency 1) requests to compare")
    return statistics.median(values)


def compare(baseline: list[dict], eagle3: list[dict], threshold: float = 1.0, floor: float | None = None,
            labels: tuple[str, str] = GATE_LABELS) -> GateReport:  # fmt: skip
    """Gate side B (by default EAGLE-3) against side A (the baseline): B / A >= threshold, B >= floor. Speculation
    is judged on every side whose requests or server report an accept length, so an A/B of two speculative stacks
    fails when either one's speculation is not running."""
    a, b = labels
    base = single_stream_median(baseline, "the baseline" if labels == GATE_LABELS else a)
    spec = single_stream_median(eagle3, "the EAGLE-3 run" if labels == GATE_LABELS else b)
    ratio = spec / base
    speed = f"{b} {spec:.1f} tok/s is {ratio:.3f}x the {a}'s {base:.1f}"
    worth = "EAGLE-3 pays for itself" if labels == GATE_LABELS else f"{b} may replace {a}"
    found = [
        Finding("speed-up", FAIL, f"{speed}, below the threshold {threshold:g}x")
        if ratio < threshold
        else Finding("speed-up", OK, f"{speed}, at least the threshold {threshold:g}x: {worth}")
    ]
    if floor is not None:
        below = spec < floor
        where = "below" if below else "at least"
        found.append(
            Finding("floor", FAIL if below else OK, f"{b} {spec:.1f} tok/s is {where} the floor {floor:g} tok/s")
        )
    acceptance = {a: acceptance_of(baseline), b: acceptance_of(eagle3)}
    if labels == GATE_LABELS:  # the baseline does not speculate: only EAGLE-3's speculation is judged
        found += speculation_findings(acceptance[b])
    else:  # two named sides (e.g. two stacks), each speculating or not as its records show
        found += [f for label in labels for f in speculation_findings(acceptance[label], label)]
    return GateReport(base, spec, ratio, threshold, floor, found, acceptance, labels)


# Accept length = tokens per verify step; 1.0 is the verify step's own token alone. Below 1.05 is fewer
# than one accepted draft token in twenty steps, which is nothing (completion_tokens / verify_ct rounds).
NOT_RUNNING_BELOW = 1.05


def speculation_findings(acceptance: dict, side: str = "") -> list[Finding]:
    """An accept length of 1.0 means no draft token was ever accepted: speculation costs and never pays (e.g. EAGLE
    with an EAGLE-3 draft, sgl-project/sglang #21272). From the requests' meta_info, else the server's gauge."""
    length = acceptance["request_accept_length"]
    source = "median per request"
    if length is None:
        length, source = acceptance["server_accept_length"], "server gauge sglang:spec_accept_length"
    if length is None:
        return []
    name = f"speculation ({side})" if side else "speculation"
    if length < NOT_RUNNING_BELOW:
        return [Finding(name, FAIL, f"accept length {length:.2f} ({source}): speculation is not running, "
                        "no draft token is accepted; check speculative_algorithm (EAGLE3 for an EAGLE-3 draft) "
                        "and the draft with `sglang-eagle3 probe --draft`")]  # fmt: skip
    return [Finding(name, OK, f"accept length {length:.2f} ({source}): draft tokens are accepted")]


def acceptance_of(records: list[dict]) -> dict:
    """Median per-request accept length, and the server's accept gauges and decode speed over the run."""
    lengths = [r["spec_accept_length"] for r in records if r["type"] == "request" and r.get("ok")
               and isinstance(r.get("spec_accept_length"), (int, float))]  # fmt: skip
    server = next((r for r in records if r["type"] == "server_metrics" and "delta" in r), {})
    return {
        "request_accept_length": statistics.median(lengths) if lengths else None,
        "server_accept_length": server.get("spec_accept_length"),
        "server_accept_rate": server.get("spec_accept_rate"),
        "server_decode_tok_s": server.get("decode_tok_s_per_request"),
        "server_generated_tokens": (server.get("delta") or {}).get("sglang:generation_tokens_total"),
    }


def render_verdict(v: GateReport) -> str:
    lines = [
        "Single-stream decode, median tok/s:",
        f"  {v.labels[0]:<9} {v.baseline_tok_s:8.1f}",
        f"  {v.labels[1]:<9} {v.eagle3_tok_s:8.1f}   ({v.ratio:.3f}x, gate: >= {v.threshold:g}x"
        + (f" and >= {v.floor:g} tok/s)" if v.floor is not None else ")"),
        "",
        f"Reference ({reference()['host']}):",
    ]
    for ref in reference()["runs"]:
        lines.append(f"  {ref['tok_s']:8.1f}  {ref['configuration']}")
    if any(value is not None for a in v.acceptance.values() for value in a.values()):
        lines += ["", "Acceptance (per-request meta_info; server /metrics over the run):"]
        lines.append(f"    {'':<9} {'accept len':>10} {'server len':>10} {'server rate':>11} {'server tok/s':>12} "
                     f"{'gen tokens':>10}")  # fmt: skip
        for label, a in v.acceptance.items():
            cells = [(a["request_accept_length"], 10, ".2f"), (a["server_accept_length"], 10, ".2f"),
                     (a["server_accept_rate"], 11, ".2f"), (a["server_decode_tok_s"], 12, ".1f"),
                     (a["server_generated_tokens"], 10, ".0f")]  # fmt: skip
            lines.append(f"    {label:<9} " + " ".join(f"{x:>{w}{f}}" if x is not None else f"{'-':>{w}}"
                                                     for x, w, f in cells))  # fmt: skip
    lines += ["", *(f.render() for f in v.findings), findings.render_verdict(v.findings)]
    return "\n".join(lines)
