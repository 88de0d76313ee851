"""The NixOS options of the stand-in (tests/nix/nixpkgs/nixos) checked against nixpkgs' declarations.

tests/nix/nixos-options.json holds, one row per option, every NixOS option that modules/*.nix,
nix/module-checks.nix, nix/gpu-host.nix, nix/tests/router-vm.nix and the flake's nixosModules read
or set, with the nixpkgs file that declares it, the commit of the copy read, its type (as nixpkgs
writes it, and the name and description nixpkgs' lib gives it) and its default
(tests/support/standin_tables.py: what this test shares with tests/test_nixpkgs_standin.py). The uses
are every `config.<option>` the modules read and every option they define, in any branch of their
mkIf (tests/nix/nixpkgs/nixos/trace-options.nix), and the option paths in the files; each stand-in
option must have its row's type name, description, readOnly and default (tests/nix/standin-options.nix),
and a declared type written with lib.types alone must give its row's description. A drifted stand-in
(a service's `path` taking packages only) fails.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest
from support import standin_tables
from support.flake_eval import REPO, Workspace, needs_flake_eval
from support.nix_harness import nix_eval

TABLE = standin_tables.Table(
    "nixos-options.json",
    "options",
    "standin-options.nix",
    how_to_add="read its declaration in nixpkgs (search tool: read_file on NixOS/nixpkgs, the module that declares "
    "it), add a row to tests/nix/nixos-options.json with file, repo, commit, type {declared, name, description} and "
    "the default, and declare it so in tests/nix/nixpkgs/nixos/modules (docs/nix.md, 'The nixpkgs stand-in')",
)
# Who reads the evaluated hosts' config (trace-options.nix's label): the module checks.
EVALUATED = "<the evaluated system's config>"
# What the tracer counts: the flake's own files (the harness, tests/nix/trace-uses.nix, is not a use).
FLAKE_FILES = re.compile(r"^(flake\.nix|nix/.*\.nix|modules/.*\.nix)$")

pytestmark = needs_flake_eval()


# -- the uses ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("traced"), trace_uses=True)


def relative(file: str, ws: Workspace) -> str:
    """A traced file as a path in the repository (the flake is read from the store or the workspace)."""
    for prefix in (f"{ws.flake}/", "-source/"):
        if prefix in file:
            return file.split(prefix, 1)[1]
    return file


def trace_options(ws: Workspace) -> list[dict]:
    """Every use the flake's modules make of NixOS options, as trace-options.nix prints them."""
    result, uses = standin_tables.trace(ws, "nixos-option")
    # NixOS refuses a definition of an option nobody declares, in any branch: say what to add.
    undeclared = re.search(
        r"The option `([^']+)' does not exist\. Definition values:\n\s*- In `([^']+)'", result.stderr
    )
    assert not undeclared, (
        f"{undeclared.group(1)} (set by {relative(undeclared.group(2), ws)}): the stand-in declares no such option; "
        f"{TABLE.how_to_add}"
    )
    assert result.returncode == 0 and uses, result.stderr[-6000:]
    for use in uses:
        use["file"] = relative(use["file"], ws)
    return [u for u in uses if u["file"] == EVALUATED or FLAKE_FILES.match(u["file"])]


@pytest.fixture(scope="module")
def uses(traced) -> list[dict]:
    return trace_options(traced)


def coverage(uses: list[dict], rows: dict) -> tuple[list[str], dict[str, set[str]]]:
    """(uses no row covers, each row's covered reads; "" stands for the row itself)."""
    missing: list[str] = []
    covered: dict[str, set[str]] = defaultdict(set)
    for use in uses:
        option, how = use["option"], f"{use['use']} by {use['file']}"
        if use.get("declared") is False:
            missing.append(f"{option} ({how}): the stand-in declares no such option; {TABLE.how_to_add}")
        elif option not in rows:
            missing.append(TABLE.no_row(f"{option} ({how})"))
        elif "value" in use:
            read = ".".join(use["value"])
            match = next((r for r in rows[option].get("reads", []) if r == read or r.startswith(read + ".")), None)
            if match is None:
                missing.append(
                    f'{option} ({how}) reads .{read} on its value: add it to the row\'s "reads" (where nixpkgs '
                    f"defines it: reads_file, reads_commit) and give the stand-in's default value it"
                )
            else:
                covered[option] |= {"", match}
        else:
            covered[option].add("")
    return sorted(set(missing)), covered


def test_every_option_the_modules_use_has_its_row(uses):
    missing, _ = coverage(uses, TABLE.rows())
    assert not missing, "the modules use NixOS options the table says nothing of:\n" + "\n".join(missing)


def test_every_row_and_read_of_the_table_is_used(uses):
    rows = TABLE.rows()
    TABLE.assert_all_used(rows, coverage(uses, rows)[1])


def test_the_modules_both_read_and_set_nixos_options(uses):
    """The tracer sees each kind of use, and in each file the issue names (a silent tracer would pass the rest)."""
    seen = {(u["use"], u["option"], u["file"]) for u in uses}
    for expected in [
        ("read", "hardware.nvidia.enabled", "modules/sglang-eagle3.nix"),
        ("set", "systemd.services.<name>.path", "modules/sglang-eagle3.nix"),
        ("set", "systemd.services.<name>.serviceConfig", "modules/sglang-eagle3-models.nix"),
        ("read", "services.prometheus.enable", "modules/sglang-eagle3-monitoring.nix"),
        ("set", "services.prometheus.scrapeConfigs.*.metrics_path", "modules/sglang-eagle3-monitoring.nix"),
        ("set", "networking.firewall.allowedTCPPorts", "modules/sglang-router.nix"),
        ("set", "hardware.nvidia.package", "modules/examples/8-gpu-host.nix"),
        ("set", "networking.firewall.trustedInterfaces", "modules/examples/two-node.nix"),
        ("set", "services.grafana.settings.security.secret_key", "nix/module-checks.nix"),
        ("read", "systemd.units.<name>.unit", EVALUATED),
        ("set", "system.build", "nix/tests/router-vm.nix"),
        ("set", "users.users.<name>.isSystemUser", "modules/sglang-eagle3.nix"),
    ]:
        assert expected in seen, expected
    assert any(u.get("value") == ["nvidiaPackages", "latest"] for u in uses if u["option"] == "boot.kernelPackages")
    # The flake's own options are not NixOS's: never traced.
    assert not [u for u in uses if u["option"].startswith(("services.sglang-eagle3", "services.sglang-router"))]


# What a scan of the files finds: option paths in the NixOS namespaces, read from `config.` or
# written anywhere (definitions, assertion messages, descriptions). It also sees uses no evaluation
# reaches, and is what the traced uses must cover.
SCANNED = [REPO / "flake.nix", *sorted((REPO / "modules").rglob("*.nix")), REPO / "nix/module-checks.nix",
           REPO / "nix/gpu-host.nix", REPO / "nix/tests/router-vm.nix"]  # fmt: skip
NAMESPACES = "|".join(
    ["assertions", "boot", "environment", "fileSystems", "hardware", "networking", "nix", "programs", "security"]
    + ["services", "system", "systemd", "users", "virtualisation", "warnings"]
)
PART = r"""(?:[A-Za-z_][\w'-]*|"[\w./-]*"|\$\{[^}]*\})"""
MENTION = re.compile(rf"(?<![\w.$/{{-])((?:{NAMESPACES})(?:\.{PART})+)")
READ = re.compile(rf"\bconfig\.((?:{NAMESPACES}|nixpkgs)(?:\.{PART})+)")
# The flake's own options, and a service's environment variables (`environment.HF_HOME` inside
# systemd.services.<name>): upper case, where NixOS's environment.* options are camelCase.
NOT_NIXOS = re.compile(r"^(services\.sglang-eagle3|services\.sglang-router)\b|^environment\.[A-Z]")


def option_paths(text: str) -> list[str]:
    return [m.group(1) for m in [*MENTION.finditer(text), *READ.finditer(text)] if not NOT_NIXOS.match(m.group(1))]


def scanned_mentions() -> dict[str, set[str]]:
    return standin_tables.scan(SCANNED, option_paths)


def parts(path: str) -> list[str]:
    return re.findall(r'"[^"]*"|\$\{[^}]*\}|[^.]+', path)


def covers(option: str, mention: str) -> bool:
    """Whether a traced option and a scanned path name the same place: one is a prefix of the other,
    `<name>`, `*`, a quoted name and ${...} matching any part."""
    a, b = parts(option), parts(mention)
    wild = lambda p: p in ("<name>", "*") or p.startswith(('"', "${"))  # noqa: E731
    return all(x == y or wild(x) or wild(y) for x, y in zip(a, b, strict=False))


def test_the_files_mention_no_option_the_trace_lacks(uses):
    traced_options = {u["option"] for u in uses}
    problems = [
        f"{mention} ({', '.join(sorted(files))}): no traced use covers it; force the host or option that uses it in "
        "tests/nix/trace-uses.nix (or, if it is no NixOS option, say so in NOT_NIXOS)"
        for mention, files in sorted(scanned_mentions().items())
        if not any(covers(option, mention) for option in traced_options)
    ]
    assert not problems, "\n".join(problems)


def test_the_scan_finds_what_the_modules_name():
    mentions = scanned_mentions()
    assert mentions["hardware.nvidia.enabled"] == {"modules/sglang-eagle3.nix"}
    assert "modules/sglang-eagle3.nix" in mentions["services.xserver.videoDrivers"]  # in an assertion's message
    assert "boot.kernelPackages.nvidiaPackages.latest" in mentions
    assert not [m for m in mentions if m.startswith(("environment.HF_", "services.sglang"))]
    assert not covers("systemd.services.<name>.path", "systemd.sockets.foo")
    assert covers("systemd.units.<name>.unit", "systemd.units.${name}.unit")


# -- the stand-in against the table ------------------------------------------------------------


def drift(rows: dict, facts: dict) -> list[str]:
    """Where the stand-in differs from the table: one line per difference, naming the row."""
    problems = []
    for key, row in rows.items():
        fact, declared = facts[key], row["type"]
        where = f"{key} (nixpkgs: {row['file']}, {declared['declared']})"
        if not fact["found"]:
            problems.append(f"{where}: the stand-in declares no such option")
            continue
        for field in ("name", "description"):
            if fact[field] != declared[field]:
                problems.append(f"{where}: type {field} {fact[field]!r}, nixpkgs has {declared[field]!r}")
        if fact["readOnly"] != row.get("readOnly", False):
            problems.append(f"{where}: readOnly is {fact['readOnly']}, nixpkgs has {row.get('readOnly', False)}")
        if "default" in row and fact["default"] != row["default"]:
            problems.append(f"{where}: default {json.dumps(fact['default'])}, nixpkgs has {json.dumps(row['default'])}")
        if "defaultText" in row and fact["default"] == "<none>":
            problems.append(f"{where}: no default, nixpkgs has {row['defaultText']}")
        for read, present in zip(row.get("reads", []), fact["reads"], strict=True):
            if not present:
                problems.append(f"{where}: its default value has no .{read}, nixpkgs has ({row['reads_file']})")
    return problems


@pytest.fixture(scope="module")
def facts(traced) -> dict:
    return TABLE.facts(traced.nixpkgs)


def test_every_row_cites_the_nixpkgs_file_and_commit_read():
    rows = TABLE.rows()
    assert not TABLE.uncited(rows), "\n".join(TABLE.uncited(rows))
    rows["assertions"]["commit"] = rows["assertions"]["commit"][:7]
    del rows["boot.kernelPackages"]["reads_commit"]
    assert TABLE.uncited(rows) == [
        f"assertions: commit {rows['assertions']['commit']!r} is no commit read (40 hex digits)",
        f"boot.kernelPackages: reads_file {rows['boot.kernelPackages']['reads_file']!r} without the commit read "
        "(reads_commit)",
    ]


def test_the_standin_declares_each_option_as_nixpkgs_does(facts):
    problems = drift(TABLE.rows(), facts)
    assert not problems, "the stand-in's NixOS (tests/nix/nixpkgs/nixos) drifted from nixpkgs:\n" + "\n".join(problems)


def test_each_declared_type_gives_its_rows_description(traced):
    """A row's type as nixpkgs writes it, where it uses lib.types alone, is what its name and
    description say (the others name nixpkgs' local bindings: unitNameType, promTypes.*, ...)."""
    lib = traced.nixpkgs / "lib"
    known = set(nix_eval(f"builtins.attrNames (import {lib}).types"))

    def only_lib_types(declared: str) -> bool:
        # Bare names are lib.types' only under `with types;` (filesystems.nix's own nonEmptyStr is not).
        code = re.sub(r'"[^"]*"', "", declared)
        bare = re.sub(r"^with (lib\.)?types;", "", code)
        if bare != code:
            return set(re.findall(r"[A-Za-z_][\w']*", bare)) <= known
        qualified = re.findall(r"\b(?:lib\.)?types\.(\w+)", code)
        rest = re.sub(r"\b(?:lib\.)?types\.\w+", "", code)
        return set(qualified) <= known and not re.search(r"[A-Za-z_]", rest)

    derivable = {key: row["type"] for key, row in TABLE.rows().items() if only_lib_types(row["type"]["declared"])}
    assert {"systemd.services.<name>.path", "users.users.<name>.home", "services.xserver.videoDrivers"} <= set(
        derivable
    ), sorted(derivable)
    exprs = " ".join(
        f'"{key}" = let t = with lib; with lib.types; {t["declared"]}; in {{ inherit (t) name description; }};'
        for key, t in derivable.items()
    )
    got = nix_eval(f"let lib = import {lib}; in {{ {exprs} }}")
    wrong = [
        f"{key}: {t['declared']} is {got[key]}, the row says {dict(name=t['name'], description=t['description'])}"
        for key, t in derivable.items()
        if got[key] != {"name": t["name"], "description": t["description"]}
    ]
    assert not wrong, "\n".join(wrong)


def test_a_drifted_standin_fails_the_comparison(traced, facts, tmp_path):
    """A service's `path` taking packages only (nixpkgs: packages or strings): the comparison names the row."""
    systemd = "nixos/modules/systemd.nix"
    declared = re.search(
        r"        path = mkOption \{\n          type = (types\.listOf \(types\.oneOf \[.*?\]\));",
        (traced.nixpkgs / systemd).read_text(),
        re.DOTALL,
    )
    assert declared, "systemd.nix's path option moved; update this test"
    drifted = standin_tables.drifted(traced, tmp_path, systemd, declared.group(1), "types.listOf types.package")
    problems = drift(TABLE.rows(), TABLE.facts(drifted))
    assert [p for p in problems if p not in drift(TABLE.rows(), facts)] == [
        "systemd.services.<name>.path (nixpkgs: nixos/lib/systemd-unit-options.nix, with types; listOf (oneOf "
        "[ package str ])): type description 'list of package', nixpkgs has 'list of (package or string)'"
    ], problems


def test_a_use_the_table_lacks_and_a_row_nothing_uses_fail(uses):
    rows = TABLE.rows()
    del rows["systemd.services.<name>.path"]
    missing, _ = coverage(uses, rows)
    assert (
        "systemd.services.<name>.path (set by modules/sglang-eagle3.nix): no row; read its declaration in nixpkgs"
        in "\n".join(missing)
    ), missing
    rows = TABLE.rows()
    rows["boot.kernelPackages"]["reads"] = []
    missing, _ = coverage(uses, rows)
    assert any(
        "boot.kernelPackages (read by modules/examples/8-gpu-host.nix) reads .nvidiaPackages" in m for m in missing
    )
    rows = TABLE.rows()
    rows["services.nginx.enable"] = rows["services.prometheus.enable"]
    _, covered = coverage(uses, rows)
    assert "" not in covered["services.nginx.enable"] and "" in covered["services.prometheus.enable"]


def test_a_module_using_an_option_the_table_lacks_fails_naming_it(tmp_path):
    """End to end: the router module given, in a branch no evaluated host takes, a definition of
    networking.firewall.allowedUDPPorts guarded by a read of networking.hostName (the tracer
    evaluates the condition), and then a definition of an option the stand-in does not declare."""
    ws = Workspace(tmp_path / "ws", trace_uses=True)
    router = ws.flake / "modules" / "sglang-router.nix"
    original = router.read_text()
    tail = "    environment.systemPackages = [ cfg.package ];\n  };\n}\n"
    assert original.endswith(tail)
    guarded = '    networking.firewall.allowedUDPPorts = lib.mkIf (config.networking.hostName == "x") [ 1 ];\n'
    router.write_text(original.removesuffix(tail) + tail.replace("  };", guarded + "  };"))
    missing, _ = coverage(trace_options(ws), TABLE.rows())
    assert [m.split(";")[0] for m in missing] == [
        "networking.firewall.allowedUDPPorts (set by modules/sglang-router.nix): no row",
        "networking.hostName (read by modules/sglang-router.nix): no row",
    ], missing
    router.write_text(original.removesuffix(tail) + tail.replace("  };", "    security.sudo.enable = false;\n  };"))
    with pytest.raises(AssertionError, match=r"^security \(set by modules/sglang-router.nix\): the stand-in declares"):
        trace_options(ws)
