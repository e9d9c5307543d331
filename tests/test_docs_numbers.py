"""Every number of docs/benchmarks.md (and the results quoted in README / docs) from benchmarks/results/.

Each benchmark writes its section of docs/benchmarks.md between ``<!-- name:start -->`` /
``<!-- name:end -->`` markers from its JSON payload (benchmarks/_report.py). Here:

- every section's stamp (machine, date, the script and JSON it cites) is that JSON's, and the
  cited script exists;
- the headline sections are re-rendered from their payload with the benchmark's own rendering
  code and must equal the doc, character for character: learning, every retrieval-ladder section,
  retrieval, demos, bm25_reference, throughput. A number edited by hand fails;
- where the payload's numbers are means over per-item rows, they are recomputed from the rows:
  learning (``learning_tasks.json``, one entry per run named by the row's ``tasks_key``: stage
  means, paired gains, retrieval baselines), demos, toolsearch_invalid, retrieval quality
  (``retrieval_queries.json``), bm25_reference and the ladder (``<name>_queries.json``; the runs from
  before the rows were kept are checked on their untrained rungs against a run that kept them);
- the other measurement sections print only numbers found in their payload (a lookup);
- outside docs/benchmarks.md: README's results table, the paired gains quoted in README and
  docs/learning.md (learning runs, and the credit-scheme comparisons recomputed from their run files), docs/retrieval.md's quality table and docs/datasets.md's BM25 reference table.
"""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"


def bench(name: str):
    """A benchmark script as a module: ``benchmarks.<name>`` (benchmarks/ is a package; run from the root)."""
    return importlib.import_module(f"benchmarks.{name}")


SECTION = re.compile(
    r"<!-- (?P<name>[\w-]+):start -->\n## (?P<title>[^\n]*)\n\n_(?P<machine>[^\n]*), (?P<date>[0-9T:+-]+)_ "
    r"\(`(?P<script>(?:benchmarks|examples)/[^`]*)`, raw numbers in `benchmarks/results/(?P<json>[^`]*)`\)\n\n"
    r"(?P<body>.*?)\n<!-- (?P=name):end -->", re.S)


def sections(text: str | None = None) -> dict[str, dict[str, str]]:
    return {m["name"]: m.groupdict() for m in SECTION.finditer(DOC.read_text() if text is None else text)}


def payload(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def close(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


def test_every_section_is_stamped_by_its_results_file():
    text = DOC.read_text()
    found = sections()
    assert len(found) == text.count(":start -->") == text.count(":end -->")  # every section parses
    for name, sec in found.items():
        assert sec["json"] == f"{name}.json", name
        data = payload(name)
        assert (sec["machine"], sec["date"]) == (data["machine"], data["date"]), name
        script = sec["script"].split()[0]
        assert (ROOT / script).is_file(), f"{name} cites {sec['script']}, which is not there"


def check_learning(doc_text: str | None = None) -> None:
    learning = bench("learning")

    data = payload("learning")
    assert sections(doc_text)["learning"]["body"] == learning.report_body(data["results"], learning.report_args(data)).strip()
    entries = learning.load_task_runs(RESULTS / "learning_tasks.json")["runs"]
    for run, row in data["results"].items():
        entry = entries[row["tasks_key"]]  # every reported run names the rows it was computed from
        assert entry["run"] == run.split("@")[0] and entry["env_id"] == row["env_id"]  # an earlier run kept as RUN@DATE
        stages = entry["stages"]
        for stage in ("base", "warm_start", "grpo"):
            if row.get(stage) is None:
                assert stage not in stages, (run, stage)
                continue
            assert len(stages[stage]) == row["eval_tasks"], (run, stage)
            means = learning.stage_means(stages[stage])
            for key, value in row[stage].items():
                assert close(means[key], value), (run, stage, key, means[key], value)
        for name, gain in learning.gains_from_rows(stages).items():
            if row.get(name) is not None:
                assert close(gain["gain"], row[name]["gain"]) and close(gain["se"], row[name]["se"]), (run, name)
                assert gain["exceeds_2se"] == row[name]["exceeds_2se"], (run, name)
        # decomposer retrieval baselines: recomputed from their rows where the run kept them (the two
        # 64-token runs predate the rows and an older BM25 tool text; their baselines are means only)
        for baseline, rows in (entry.get("baselines") or {}).items():
            for key in ("c10", "ndcg5"):
                mean = sum(r[key] for r in rows) / len(rows)
                assert close(mean, row["retrieval_baselines"][baseline][key]), (run, baseline, key)


def test_learning_section_renders_from_its_results_and_rows():
    check_learning()


def test_demos_section_renders_from_its_per_task_rows():
    demos = bench("demos")
    from benchmarks._report import markdown_table

    data = payload("demos")
    body = sections()["demos"]["body"]
    table = markdown_table(demos.HEADERS, demos.table_rows(data["runs"]))  # summarised from the rows
    assert table in body
    for name, run in data["runs"].items():
        rows = run["per_task"]
        assert sum(r["kept"] for r in rows) == sum(run["kept_by_agent"].values()), name
        assert all(r["reward"] is None or r["kept"] == (r["reward"] >= run["command"]["min_reward"]) for r in rows), name


def ladder_sections() -> list[str]:
    return sorted(n for n, s in sections().items() if s["script"].split()[0] == "benchmarks/ladder.py")


def test_there_are_ladder_sections():
    assert "ladder" in ladder_sections()


@pytest.mark.parametrize("name", ladder_sections())
def test_ladder_section_renders_from_its_results(name):
    ladder = bench("ladder")

    data = payload(name)
    body = sections()[name]["body"]
    assert data["results"], name
    for dataset, res in data["results"].items():
        assert ladder.dataset_markdown(dataset, res) in body, (name, dataset)
    rows_file = RESULTS / f"{name}_queries.json"
    if rows_file.exists():  # runs since the rows were kept: each rung's numbers are 100 x the rows' means
        rows = json.loads(rows_file.read_text())
        for dataset, res in data["results"].items():
            for label, metrics in res["rungs"].items():
                if f"{dataset}/{label}" not in rows:
                    continue
                got = rows[f"{dataset}/{label}"]
                assert len(got) == res["queries"]
                for key, value in metrics.items():
                    if key in got[0] and key != "task_id":
                        mean = sum(r[key] for r in got) / len(got)
                        assert close(mean if key == "K" else 100 * mean, value), (name, dataset, label, key)


def test_retrieval_section_renders_from_its_results_and_rows():
    retrieval = bench("retrieval")

    data = payload("retrieval")
    assert sections()["retrieval"]["body"] == retrieval.report_markdown(data).strip()
    rows = json.loads(retrieval.QUERY_ROWS.read_text())
    assert set(rows) == set(data["quality"])
    for key, metrics in data["quality"].items():
        assert len(rows[key]) == metrics["queries"], key
        for metric, value in retrieval.quality_means(rows[key]).items():
            assert close(value, metrics[metric]), (key, metric)


def test_a_number_edited_by_hand_is_caught():
    """The checks compare exact renderings: one printed digit changed in the doc fails them."""
    text = DOC.read_text()
    edited = text.replace("+0.080 ± 0.023", "+0.081 ± 0.023", 1)
    assert edited != text
    with pytest.raises(AssertionError):
        check_learning(edited)


def test_retrieval_doc_quality_table_is_the_benchmarks():
    """docs/retrieval.md's quality-anchor table: each printed number is retrieval.json's, to 0.1."""
    text = (ROOT / "docs" / "retrieval.md").read_text()
    section = text[text.index("## Quality anchors"):text.index("Dynamic top-K on the retrievers' own scores")]
    quality = payload("retrieval")["quality"]
    datasets = {"StableToolBench": "stabletoolbench", "Seal-Tools dev": "seal_tools"}
    methods = {"BM25, old text": "bm25 (old text)", "BM25, default text": "bm25", "MiniLM": "dense", "hybrid": "hybrid"}
    seen = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("|") or cells[0] not in datasets:
            continue
        key = f"{datasets[cells[0]]}/{next(v for k, v in methods.items() if cells[1].startswith(k))}"
        assert cells[2:7] == [f"{quality[key][m]:.1f}" for m in ("N@1", "N@5", "N@10", "R@10", "C@10")], key
        seen.add(key)
    assert seen == set(quality)


def paired_gains_from_rows() -> dict[str, list[frozenset[str]]]:
    """Every "gain ± se" (3 decimals) between two stages of one learning_tasks.json entry, with the names
    a quote of it must stand beside (its comparison): the run's reward for a GRPO stage, ``warm`` for
    base → warm start, ``constrained`` for the constrained-decoding check."""
    import itertools

    learning = bench("learning")
    from toolgym.evaluation.evaluate import paired_gain
    from toolgym.evaluation.paired import compare

    out: dict[str, list[frozenset[str]]] = {}
    for entry in learning.load_task_runs(RESULTS / "learning_tasks.json")["runs"].values():
        # toolsearch_toolsearcher -> toolsearcher; dialogue_counterfactual_seed1, decompose_counterfactual_lr2e-3 -> counterfactual
        reward = re.sub(r"_(seed\d+|lr[\w.+-]+)$", "", entry["run"].split("_", 1)[1])
        for a, b in itertools.permutations(entry["stages"], 2):
            g = compare({"rows": entry["stages"][a]}, {"rows": entry["stages"][b]})
            names = frozenset({reward} if "grpo" in (a, b) else {"warm"})
            out.setdefault(f"{g['gain']:+.3f} ± {g['se']:.3f}", []).append(names)
    # runs that differ only by seed (dialogue_counterfactual, dialogue_counterfactual_seed1): the seed-level gain
    by_seed: dict[str, dict[int, float]] = {}
    for entry in learning.load_task_runs(RESULTS / "learning_tasks.json")["runs"].values():
        m = re.fullmatch(r"([a-z]+_[a-z_0-9]+?)(?:_seed(\d+))?", entry["run"])
        if m and "_lr" not in entry["run"] and {"warm_start", "grpo"} <= set(entry["stages"]):
            g = compare({"rows": entry["stages"]["warm_start"]}, {"rows": entry["stages"]["grpo"]})
            by_seed.setdefault(m[1], {})[int(m[2] or 0)] = g["gain"]
    for run, gains in by_seed.items():
        if len(gains) > 1:
            sl = bench("credit_schemes").seed_level(list(gains.values()))
            out.setdefault(f"{sl['mean']:+.3f} ± {sl['se']:.3f}", []).append(frozenset({run.split("_", 1)[1], "seed"}))
    # the multi-search warm start against the single-search one on their shared held-out tasks
    warm = RESULTS / "credit_schemes_multisearch" / "toolsearch_multi" / "warm_start.json"
    single = RESULTS / "credit_schemes" / "toolsearch_multi" / "grpo_f1_seed0.json"
    if warm.exists() and single.exists():
        old_rows = json.loads(single.read_text())["warm"]["rows"]
        by_id = {r["task_id"]: r for r in json.loads(warm.read_text())["rows"]}
        for key in ("f1", "srecall", "match", "invalid_rate", "search_turns"):
            g = compare({"rows": old_rows}, {"rows": [by_id[r["task_id"]] for r in old_rows]}, key=key)
            out.setdefault(f"{g['gain']:+.3f} ± {g['se']:.3f}", []).append(frozenset({"multi", "single"}))
    rows = payload("toolsearch_invalid")["rows"]  # plain vs constrained decoding of the warm start
    g = compare({"rows": rows["plain"]}, {"rows": rows["constrained"]})
    out.setdefault(f"{g['gain']:+.3f} ± {g['se']:.3f}", []).append(frozenset({"constrained"}))
    cost = payload("category_cost")["rows"]  # a category-naming policy's searches re-run without categories
    for a, b, names in (("as_run", "unknown_dropped", {"as run", "unknown categor"}),
                        ("unknown_dropped", "no_category", {"unknown categor", "no category"})):
        g = paired_gain([r[f"recall_{a}"] for r in cost], [r[f"recall_{b}"] for r in cost])
        out.setdefault(f"{g['gain']:+.3f} ± {g['se']:.3f}", []).append(frozenset(names))
    for value, names in credit_scheme_gains().items():
        out.setdefault(value, []).extend(names)
    return out


def comparison_names(a: str, b: str) -> frozenset[str]:
    """The names a quoted credit-scheme difference must stand beside: each arm's scheme and variant
    (``toolsearcher+curriculum`` -> toolsearcher, curriculum); the warm start needs no name."""
    names = set()
    for arm in (a, b):
        if arm != "warm start":
            names |= set(arm.split("+"))
    return frozenset(names)


def credit_scheme_gains() -> dict[str, list[frozenset[str]]]:
    """Every "difference ± se" of the credit-scheme comparisons (each scheme against the warm start and every
    pair, every metric; the task-paired se and the seed-level se), recomputed from the committed run files of
    each results folder, with the names of its two arms."""
    cs = bench("credit_schemes")
    out: dict[str, list[frozenset[str]]] = {}
    for folder in sorted(RESULTS.glob("credit_schemes*")):
        if not folder.is_dir():
            continue
        for env, runs in cs.load_run_files(folder).items():
            for pair in cs.pairwise(cs.by_scheme(runs), list(cs.metric_names(env))):
                names = comparison_names(pair["a"], pair["b"])
                for k in cs.metric_names(env):  # A − B, or B − A as prose may quote it; task-paired and seed-level se
                    values = {f"{sign * pair[k]['diff']:+.3f} ± {pair[k]['se']:.3f}" for sign in (1, -1)}
                    sl = pair[k]["seed_level"]
                    if sl["se"] is not None:
                        values |= {f"{sign * sl['mean']:+.3f} ± {sl['se']:.3f}" for sign in (1, -1)}
                    for v in values:
                        out.setdefault(v, []).append(names)
    pooled = RESULTS / "credit_schemes_pooled.json"  # several warm starts, the unit (warm start, seed)
    if pooled.exists():
        folders = [ROOT / w["folder"] for w in json.loads(pooled.read_text())["warm_starts"].values()]
        for env, runs in cs.load_pooled(folders)[0].items():
            key = next(iter(cs.metric_names(env)))
            for pair in cs.pairwise(cs.by_scheme(runs), [key]):
                sl = pair[key]["seed_level"]
                if sl["se"] is not None:
                    for sign in (1, -1):
                        out.setdefault(f"{sign * sl['mean']:+.3f} ± {sl['se']:.3f}", []).append(
                            comparison_names(pair["a"], pair["b"]))
    return out


QUOTE = re.compile(r"[+−-]\d\.\d{3} ± \d\.\d{3}")


def quote_contexts(span: str) -> list[tuple[str, str]]:
    """(quoted "x ± se", its context): a table row for a quote in a table, else its sentence."""
    out = []
    for block in re.split(r"\n\s*\n", span):
        lines = block.splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            units = lines
        else:
            units = re.split(r"(?<=[.])\s+(?=[A-Z*(`])", " ".join(line.strip() for line in lines))
        for unit in units:
            out += [(q.replace("−", "-"), unit) for q in QUOTE.findall(unit)]
    return out


def backed(quote: str, context: str, known: dict[str, list[frozenset[str]]]) -> bool:
    """Some comparison that gives ``quote`` has every one of its names in ``context`` (case-insensitive)."""
    low = context.lower()
    return any(all(n.lower() in low for n in names) for names in known.get(quote, []))


def test_toolsearch_invalid_means_are_its_rows():
    learning = bench("learning")
    from toolgym.evaluation.paired import compare

    data = payload("toolsearch_invalid")
    for name in ("plain", "constrained"):
        assert len(data["rows"][name]) == data["tasks"]
        for key, value in learning.stage_means(data["rows"][name]).items():
            assert close(value, data[name][key]), (name, key)
    g = compare({"rows": data["rows"]["plain"]}, {"rows": data["rows"]["constrained"]})
    assert close(g["gain"], data["plain_to_constrained"]["gain"]) and close(g["se"], data["plain_to_constrained"]["se"])


@pytest.mark.parametrize("doc, start, ends", [
    ("README.md", "## Results", ("\n## ",)),
    ("docs/learning.md", "### Measured", ("**Credit schemes", "### Credit schemes", "## Constrained decoding")),
    ("docs/learning.md", "### Credit schemes, one file per run", ("## Constrained decoding",)),
])
def test_learning_gains_in_the_docs_are_recomputed_from_rows(doc, start, ends):
    """The learning results quoted in README's results and docs/learning.md's measured section: each
    paired gain ± se is one that the per-task rows give (the credit-scheme runs are outside these spans)."""
    text = (ROOT / doc).read_text()
    begin = text.index(start)
    span = text[begin:min(i for i in (text.find(e, begin) for e in ends) if i > 0)]  # up to the first end marker
    quoted = quote_contexts(span)
    assert quoted
    known = paired_gains_from_rows()
    unbacked = [(q, c[:160]) for q, c in quoted if not backed(q, c, known)]
    assert not unbacked, f"{doc}: gains with no comparison of that name behind them: {unbacked}"


def test_a_quote_is_tied_to_its_own_comparison():
    """A number some other comparison gives does not back a quote: "+0.000 ± 0.000" is every zero pair's,
    so beside a scheme that did move it fails; beside the arm that gives it, it passes."""
    known = {"+0.000 ± 0.000": [frozenset({"grpo_match"})], "+0.117 ± 0.043": [frozenset({"counterfactual"})]}
    assert backed("+0.000 ± 0.000", "| `grpo_match` − warm start | +0.000 ± 0.000 |", known)
    assert not backed("+0.000 ± 0.000", "| `counterfactual` − warm start | +0.000 ± 0.000 |", known)
    assert not backed("+0.117 ± 0.043", "magicselector gains +0.117 ± 0.043 on dialogues.", known)
    got = quote_contexts("| a | +0.117 ± 0.043 |\n| b | −0.001 ± 0.002 |\n\nFirst sentence +0.100 ± 0.010 here. "
                         "Second `x` sentence −0.200 ± 0.020.")
    assert got == [("+0.117 ± 0.043", "| a | +0.117 ± 0.043 |"), ("-0.001 ± 0.002", "| b | −0.001 ± 0.002 |"),
                   ("+0.100 ± 0.010", "First sentence +0.100 ± 0.010 here."),
                   ("-0.200 ± 0.020", "Second `x` sentence −0.200 ± 0.020.")]


FIRST_STAGE_RUNGS = ("BM25", "dense (MiniLM)", "hybrid (BM25 + MiniLM)")  # need no trained model


def test_untrained_ladder_rungs_match_a_run_with_per_query_rows():
    """Ladder runs from before the rows were kept: their untrained first-stage rungs must print the
    same numbers as a later run that kept per-query rows on the same queries (same dataset, same
    sample size of the same total, from the ladder's own splits). The fine-tuned, rerank and decomposition rungs need the trained
    models of their run and have no rows."""
    with_rows = {n: payload(n) for n in ladder_sections() if (RESULTS / f"{n}_queries.json").exists()}
    assert with_rows, "no ladder run with per-query rows"
    checked = 0
    for name in ladder_sections():
        if name in with_rows:
            continue
        for dataset, res in payload(name)["results"].items():
            for other in with_rows.values():
                if other.get("heldout_of"):  # another split of the dataset (a mixture's held-out part)
                    continue
                ref = other["results"].get(dataset)
                if ref is None or (ref["queries"], ref["of"]) != (res["queries"], res["of"]):
                    continue
                for rung in FIRST_STAGE_RUNGS:
                    for key in ("N@5", "C@10", "C@20"):
                        assert f"{res['rungs'][rung][key]:.1f}" == f"{ref['rungs'][rung][key]:.1f}", (name, dataset, rung, key)
                        checked += 1
    assert checked


def test_bm25_reference_renders_from_its_rows_and_is_the_datasets_table():
    ref = bench("bm25_reference")

    data = payload("bm25_reference")
    assert ref.table(data["runs"]) in sections()["bm25_reference"]["body"]
    rows = json.loads((RESULTS / "bm25_reference_queries.json").read_text())
    for run in data["runs"]:
        cols = rows[ref.run_key(run)]
        assert len(cols["task_id"]) == run["queries"]
        for m in ref.METRICS:
            assert close(sum(cols[m]) / len(cols[m]), run["means"][m]), (run["label"], m)
    # docs/datasets.md's "BM25 reference" table prints the same numbers
    text = (ROOT / "docs" / "datasets.md").read_text()
    printed = {}
    for line in text[text.index("## BM25 reference"):].split("\n## ")[0].splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 5 and cells[1] in ("none", "english"):
            printed[(cells[0], cells[1])] = cells[2:]
    expected = {(r["label"], r["stemmer"] or "none"): [f"{r['means'][m]:.1f}" for m in ref.METRICS]
                for r in data["runs"]}
    assert printed == expected


# Sections whose tables print measurements straight from their payload (timings, rates, counts);
# their writers render inline, so each printed number is looked up among the payload's values.
MEASUREMENT_SECTIONS = ("rewards", "envs", "step_cost", "scale", "tool_text", "turn_cache")
NUMERIC_CELL = re.compile(r"^[+−-]?\d[\d.]*(?:e[+-]\d+)?(?: ?(?:x|%|s|MiB|MB))?(?: / [+−-]?\d[\d.]*)*$")


def printed_forms(value: float) -> set[str]:
    out = set()
    for v in (value, 100 * value):
        for f in ("{:.4g}", "{:.3g}", "{:.2g}", "{:.0f}", "{:.1f}", "{:.2f}", "{:.3f}"):
            out.add(f.format(v).lstrip("+"))
    return out


def payload_numbers(node: object) -> list[float]:
    if isinstance(node, bool):
        return []
    if isinstance(node, (int, float)):
        return [float(node)] if node == node and abs(node) != float("inf") else []
    if isinstance(node, dict):
        return [x for v in node.values() for x in payload_numbers(v)]
    if isinstance(node, list):
        return [x for v in node for x in payload_numbers(v)]
    return []


def numeric_cells(body: str) -> list[str]:
    lines = body.splitlines()
    cells = []
    for i, line in enumerate(lines):
        is_header = i + 1 < len(lines) and lines[i + 1].startswith("|---")
        if not line.startswith("|") or line.startswith("|---") or is_header:
            continue
        cells += [c.strip() for c in line.strip().strip("|").split("|")[1:] if NUMERIC_CELL.match(c.strip())]
    return cells


@pytest.mark.parametrize("name", MEASUREMENT_SECTIONS)
def test_measurement_tables_print_their_payload(name):
    data = payload(name)
    values = payload_numbers(data)
    if name == "rewards":  # its speed-up column is the loop's median over each path's
        values += [data["median_ms"]["loop"] / v for v in data["median_ms"].values()]
    known = set().union(*(printed_forms(v) for v in values))
    cells = numeric_cells(sections()[name]["body"])
    assert cells, name
    for cell in cells:
        for number in re.findall(r"[+−-]?\d[\d.]*(?:e[+-]\d+)?", cell):
            assert number.replace("−", "-").lstrip("+") in known, f"{name}: {cell!r} is not in {name}.json"


def test_throughput_section_renders_from_its_results():
    throughput = bench("throughput")  # its report is a function of the payload: re-render it exactly
    assert sections()["throughput"]["body"] == throughput.report(payload("throughput")).strip()


def test_readme_results_table_numbers_are_in_the_files_it_names():
    """README's results table: each row names its results file; every number in its "measured"
    cell is one of that file's values at the printed precision, or printed in that file's
    docs/benchmarks.md section (checked against the file above, e.g. a speed-up the report derives)."""
    text = (ROOT / "README.md").read_text()
    begin = text.index("## Results")
    section = text[begin:text.find("\n## ", begin + 1)]
    rows = [line for line in section.splitlines() if line.startswith("|") and ".json`" in line]
    assert rows
    gains = paired_gains_from_rows()
    for line in rows:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        files = re.findall(r"`(\w+)\.json`", cells[-1])
        known = set().union(*(printed_forms(v) for f in files for v in payload_numbers(payload(f))))
        known |= {n for f in files if f in sections() for n in re.findall(r"\d+\.\d+", sections()[f]["body"])}
        # a "mean ± se" its own comparison backs (e.g. the seed-level gain over runs that differ by seed)
        known |= {n.lstrip("+-") for q, c in quote_contexts(line) if backed(q, c, gains) for n in q.split(" ± ")}
        for number in re.findall(r"(?<![\w@])[+−-]?\d+\.\d+", cells[1]):
            assert number.replace("−", "-").lstrip("+") in known, f"README: {number} ({cells[0]}) is not in {files}"


def test_trl_section_is_what_its_report_writes():
    example = load_script("examples/trl_grpo.py")
    assert sections()["trl_grpo"]["body"] == example.report_markdown(payload("trl_grpo")).strip()


@pytest.mark.parametrize("name", ["group_variance", "group_variance_t08"])
def test_group_variance_sections_render_from_their_rows(name):
    """The first-step group variance of the multi-search warm start: the section is its payload's rendering and
    every mean is its per-group rows' mean."""
    gv = bench("group_variance")
    data = payload(name)
    assert sections()[name]["body"] == gv.report_body(data).strip()
    for run in data["runs"]:
        assert len(run["rows"]) == run["groups"]
        for key, value in run["mean"].items():
            assert close(sum(r[key] for r in run["rows"]) / len(run["rows"]), value), (name, key)


def test_the_warm_start_table_is_its_rows():
    """docs/learning.md's multi-search warm-start table: each cell is the mean of the kept per-task rows (the new
    warm start's file; the single-search one's rows stored in its run files), and the paired gains quoted under it
    are the rows' own."""
    from toolgym.evaluation.paired import compare

    new = json.loads((RESULTS / "credit_schemes_multisearch" / "toolsearch_multi" / "warm_start.json").read_text())
    old = json.loads((RESULTS / "credit_schemes" / "toolsearch_multi" / "grpo_f1_seed0.json").read_text())["warm"]["rows"]
    ids = [r["task_id"] for r in old]
    by_id = {r["task_id"]: r for r in new["rows"]}
    shared = [by_id[t] for t in ids]
    keys = ("f1", "srecall", "match", "invalid_rate", "search_turns")

    def cells(rows):
        means = [sum(r[k] for r in rows) / len(rows) for k in keys]
        return [f"{m:.3f}" for m in means[:-1]] + [f"{means[-1]:.2f}"]

    text = (ROOT / "docs" / "learning.md").read_text()
    table = text[text.index("<!-- warm_start_table:start -->"):text.index("<!-- warm_start_table:end -->")]
    printed = [[c.strip() for c in line.strip("|").split("|")][2:] for line in table.splitlines()[3:] if line.startswith("|")]
    assert printed == [cells(old), cells(shared), cells(new["rows"])]
    after = text[text.index("<!-- warm_start_table:end -->"):][:600]
    for key in ("f1", "srecall", "match", "search_turns"):
        g = compare({"rows": old}, {"rows": shared}, key=key)
        assert f"{g['gain']:+.3f} ± {g['se']:.3f}" in after, key
