"""Find the start-up gates in a wheel's Python sources (gates.py says what a gate is and how it is judged).

A module is read closely only where it reads a subject, a name assigned from one, or calls a helper (a module-level
function comparing a subject with its own parameter, as SGLang's assert_pkg_version): a call of a helper with
constant arguments is a gate where it is called. A name a gate reads is followed to its constants
(constants.Constants); what cannot be is listed as unresolved, never left out.
"""

from __future__ import annotations

import ast
import dataclasses
import warnings
from collections.abc import Iterator

from sglang_eagle3.source.constants import Constants, import_aliases, resolved_name

from .closure import Contents, Scanner
from .gate_statements import (
    FUNCTIONS,
    NOT_CONSTANT,
    assignments,
    candidates,
    copy,
    decisions,
    defaults,
    in_handler,
    module_name,
    negated,
    parent_map,
    role,
    scopes,
    walk_outer,
)
from .gates import (
    ATTRIBUTE_SUBJECTS,
    BUILTIN_NAMES,
    CALL_SUBJECTS,
    CONSTANT_LINE,
    EVALUATED_IMPORTS,
    FIXED,
    FIXED_CALLS,
    PLAIN_NODES,
    SAFE_BUILTINS,
    STR_METHODS,
    TESTS,
    TRIGGER,
    Gate,
    normalise,
)


def _spans(node: ast.AST, lines: set[int]) -> bool:
    """Whether any of ``lines`` falls within ``node``."""
    return any(node.lineno <= line <= node.end_lineno for line in lines)


class ModuleGates:
    """The gates of one module. `exported` maps module-level names assigned from a subject to their
    expression (for other modules of the wheel: `shared`); `helpers` maps each module-level function that
    compares a subject with one of its own parameters (SGLang's assert_pkg_version) to that gate, so that a
    call with constant arguments is judged as a gate where it is called."""

    def __init__(self, source: str, file: str, module: str):
        self.tree = ast.parse(source)
        self.text, self.file, self.module = source, file, module
        package = module.rpartition(".")[0] if not file.endswith("__init__.py") else module
        self.aliases = import_aliases(ast.walk(self.tree), package)
        self.shared: dict = {}
        self.helpers: dict[str, tuple[Gate, list[str]]] = {}
        self.helpers_here: set[str] = set()  # names of this module's helpers (known after the first pass)
        self._subject_lines: set[int] | None = None
        self._aliases_seen: dict[str, str] = {}
        self._names: list[tuple[str, int]] = []
        self.module_assigned = assignments(self.tree.body)
        self.flow = Constants(self.tree, imported=self._imported_constant)
        self.unresolved: list[dict] = []
        self.constants = {
            ("constant", f"{module}.{name}"): expr.value
            for name, expr in self.module_assigned.items()
            if isinstance(expr, ast.Constant)
        }
        self.exported = {
            f"{module}.{name}": (expr, self.aliases)
            for name, expr in self.module_assigned.items()
            if self._subjects(expr, {}, set())
        }

    def resolve(self, node: ast.AST) -> str | None:
        return resolved_name(node, self.aliases)

    def _imported_constant(self, local: str) -> list | None:
        """A name imported from another module of the wheel that assigns it a literal (for Constants)."""
        key = ("constant", self.aliases.get(local))
        return [self.shared[key]] if key in self.shared else None

    def subject_of(self, node: ast.AST) -> tuple[str, str | None] | None:
        """(kind, argument) when the node itself reads a subject."""
        if isinstance(node, ast.Call):
            target = self.resolve(node.func)
            if target in CALL_SUBJECTS:
                kind = CALL_SUBJECTS[target]
                if kind != "package":
                    return (kind, None)
                if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                    return ("package", node.args[0].value)
                if node.args and isinstance(node.args[0], ast.Name):  # a helper's parameter: its callers name it
                    return ("package-argument", node.args[0].id)
                if node.args:  # version(spec.name): not a constant; the gate lists it as unresolved
                    return ("package-argument", ast.unparse(node.args[0]))
            return None
        if isinstance(node, (ast.Attribute, ast.Name)):  # a Name: `from ..version import __version__ as v`
            target = self.resolve(node)
            if target in ATTRIBUTE_SUBJECTS:
                return (ATTRIBUTE_SUBJECTS[target], None)
            if target and target.endswith(".__version__"):
                top = target.partition(".")[0]
                return ("torch", None) if top == "torch" else ("module", top)
        return None

    def _subjects(self, node: ast.AST, local: dict[str, ast.expr], seen: set[str]) -> bool:
        """Whether the expression reads a subject, following names."""
        for child in walk_outer(node):
            if self.subject_of(child) is not None:
                return True
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in seen:
                expr = local.get(child.id, self.module_assigned.get(child.id))
                if expr is not None and self.plain(expr) and self._subjects(expr, local, seen | {child.id}):
                    return True
                if self.aliases.get(child.id) in self.shared:
                    return True
        return False

    def plain(self, expr: ast.expr) -> bool:
        """Whether an assigned value is computed from what it reads alone (constants, names, subjects,
        arithmetic, indexing, str methods, int/float/str/tuple, packaging.version): a name is followed only
        then, so a tensor's shape computed next to a capability check is not taken for a version."""
        for node in walk_outer(expr):
            if isinstance(node, ast.Call):
                if self.subject_of(node) is not None:
                    continue
                target = self.resolve(node.func) or ""
                method = isinstance(node.func, ast.Attribute) and node.func.attr in STR_METHODS
                if not (target in SAFE_BUILTINS or target.startswith(EVALUATED_IMPORTS) or method):
                    return False
            elif not isinstance(node, PLAIN_NODES):
                return False
        return True

    def substituted(self, node: ast.expr, local: dict[str, ast.expr]) -> tuple[ast.expr, dict[str, tuple], dict]:
        """A copy of the expression with every subject a placeholder name and every name followed; with the
        placeholders' subjects and the imports of every module the expression was taken from."""
        bindings: dict[str, tuple] = {}
        aliases = dict(self.aliases)
        module = self

        class Substitute(ast.NodeTransformer):
            def __init__(self, seen: frozenset = frozenset(), reader=None):
                self.seen, self.reader = seen, reader or module

            def visit(self, child):
                fixed = self.reader.resolve(child) if isinstance(child, (ast.Attribute, ast.Call)) else None
                if isinstance(child, ast.Call):
                    fixed = self.reader.resolve(child.func)
                    argument = child.args[0] if len(child.args) == 1 else None
                    if fixed in FIXED_CALLS and isinstance(argument, ast.Constant):
                        value = FIXED_CALLS[fixed].get(argument.value)
                        return ast.copy_location(ast.Constant(value=value), child)
                elif fixed in FIXED:
                    return ast.copy_location(ast.Constant(value=FIXED[fixed]), child)
                subject = self.reader.subject_of(child)
                if subject is not None:
                    name = f"_s{len(bindings)}"
                    bindings[name] = subject
                    return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), child)
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in self.seen:
                    if self.reader is module:
                        expr = local.get(child.id, module.module_assigned.get(child.id))
                        if expr is not None and module.plain(expr):  # a subject, or required = parse("3.2")
                            return Substitute(self.seen | {child.id}).visit(copy(expr))
                    target = self.reader.aliases.get(child.id)
                    if target in module.shared:
                        expr, other = module.shared[target]
                        aliases.update({k: v for k, v in other.items() if k not in aliases})
                        return Substitute(self.seen | {child.id}, _Reader(other)).visit(copy(expr))
                return super().visit(child)

        return Substitute().visit(copy(node)), bindings, aliases

    def hot_lines(self) -> set[int]:
        """Lines that read a subject, a name assigned from one, or call a helper: only the functions holding
        one are read closely."""
        if self._subject_lines is None:  # one walk, kept: the second pass only adds names
            self._subject_lines, self._names = set(), []
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Name):
                    self._names.append((node.id, node.lineno))
                if isinstance(node, (ast.Attribute, ast.Call, ast.Name)) and self.subject_of(node) is not None:
                    self._subject_lines.add(node.lineno)
        shared = {n for n, t in self.aliases.items() if t in self.shared or ("helper", t) in self.shared}
        names = shared | {name.rpartition(".")[2] for name in self.exported} | set(self.helpers_here)
        return self._subject_lines | {line for name, line in self._names if name in names}

    def gates(self) -> Iterator[Gate]:
        hot = self.hot_lines()
        if not hot:
            return
        self.unresolved = []
        for scope_name, scope, parameters in scopes(self.tree):
            if scope_name != "<module>" and not _spans(scope, hot):
                continue
            body = scope.body if scope_name != "<module>" else [s for s in scope.body if not isinstance(s, FUNCTIONS)]
            local = assignments(body) if scope_name != "<module>" else {}
            parents = parent_map(body)
            helper_parameters = parameters if scope_name != "<module>" and scope_name.count(".") == 0 else []
            for statement, test, effect, bad_when in decisions(body, self.resolve):
                if not _spans(statement, hot) and not local:
                    continue
                for node in candidates(test, self.helper_of):
                    helper = self.helper_of(node) if isinstance(node, ast.Call) else None
                    if helper is None and not self._subjects(node, local, set()):
                        continue
                    base = self._gate(node, helper, local, scope_name)
                    if base is None:
                        continue
                    for gate in self._followed(base, node, helper, scope, parameters, helper_parameters):
                        self._place(gate, node, helper, (statement, test, effect, bad_when), local, parents)
                        if helper is None and helper_parameters:
                            self._register_helper(gate, scope, scope_name, parameters)
                        yield gate

    def _followed(
        self, gate: Gate, node, helper, scope, parameters: list[str], helper_parameters: list[str]
    ) -> list[Gate]:
        """The gate once per value of each name it reads that the source binds to constants (a loop over constants,
        a module constant, a default argument, a simple assignment: constants.Constants), its comparison then
        naming the values (``check_pkg_version_at_least(pkg, '12.9') [pkg='nvidia-cublas']``). A name it still
        cannot resolve is listed in ``unresolved`` (the gate stays, unevaluated); so is a parameter of the function it
        is in, whose value each call decides (its default too), unless that function is module-level: a helper,
        judged at each call with its arguments and defaults."""
        flow = scope if scope is not self.tree else None
        if helper is not None:
            inner, helper_parameters = helper
            pairs = [*zip(helper_parameters, node.args, strict=False),
                     *((k.arg, k.value) for k in node.keywords if k.arg in helper_parameters)]  # fmt: skip
            wanted = {n.id for n in ast.walk(inner._expression) if isinstance(n, ast.Name)}
            wanted |= {a for k, a in inner._bindings.values() if k == "package-argument"}
            names = {}
            for parameter, argument in pairs:
                if parameter in wanted and self.constant(argument) is NOT_CONSTANT:
                    names[parameter] = argument
                    gate._constants.pop(parameter, None)  # a default the argument overrides
        else:
            free = {n.id for n in ast.walk(gate._expression) if isinstance(n, ast.Name)}
            free |= {a for k, a in gate._bindings.values() if k == "package-argument"}
            skip = {*gate._bindings, *gate._constants, *gate._aliases, *helper_parameters, *BUILTIN_NAMES}
            names = {n: ast.Name(id=n, ctx=ast.Load()) for n in sorted(free - skip)}
        if not names:
            return [gate]
        found, missing = {}, []
        for name, argument in names.items():
            read = name if helper is None else argument.id if isinstance(argument, ast.Name) else None
            values = None if read in parameters else self.flow.values(argument, flow)
            if values is None:
                missing.append(f"{name}={ast.unparse(argument)}" if helper is not None else name)
            else:
                found[name] = values
        if missing:
            self.unresolved.append({"file": self.file, "line": node.lineno, "function": gate.function,
                                    "comparison": gate.comparison, "names": missing})  # fmt: skip
        if not found or missing and helper is None:
            return [gate]
        combinations = [{}]
        for name, values in found.items():
            combinations = [{**c, name: v} for c in combinations for v in values]
        if len(combinations) > 64:
            names = [f"{n}: more than 64 values" for n in found]
            self.unresolved.append({"file": self.file, "line": node.lineno, "function": gate.function,
                                    "comparison": gate.comparison, "names": names})  # fmt: skip
            return [gate]
        gates = []
        for combination in combinations:
            followed = copy_gate(gate)
            followed._constants = {**gate._constants, **combination}
            followed.comparison = gate.comparison + " [" + ", ".join(f"{n}={v!r}" for n, v in combination.items()) + "]"
            followed.kinds = gate_kinds(followed._bindings, followed._constants)
            gates.append(followed)
        return gates

    def _place(self, gate: Gate, node, helper, decision: tuple, local, parents) -> None:
        """The gate's part in its decision (statement, test, effect, bad_when): the whole test (or `not` it), or one
        term of a top-level and/or, whose value is then necessary for the raise (`if a and b: raise`) or
        sufficient; its effect and bad value, the guards around it, and whether it sits in an exception handler."""
        statement, test, effect, bad_when = decision
        self._aliases_seen = {}
        term, inner = role(test, node)
        this_bad = None if bad_when is None or term is None else bad_when != negated(inner, node)
        if term in ("and", "or") and bad_when is not None:
            necessary = (term == "and") == bad_when
            gate.term = "necessary" if necessary else "sufficient"
            if necessary:  # the other terms must have the raising value too
                gate._siblings = self._terms(test, inner, bad_when, local)
        if helper is not None and node is test and isinstance(statement, ast.Expr):
            gate.effect, gate.bad_when = helper[0].effect, helper[0].bad_when  # the helper raises itself
        else:
            gate.effect = effect if this_bad is not None or effect == "value" else "branch"
            gate.bad_when = this_bad
        gate._guards = self._guards(statement, parents, local)
        gate._aliases = {**self._aliases_seen, **gate._aliases}  # the imports guards and terms read
        gate.handler = in_handler(statement, parents)

    def _register_helper(self, gate: Gate, scope, scope_name: str, parameters: list[str]) -> None:
        """A module-level function whose gate compares a subject with its own parameters (SGLang's
        assert_pkg_version) is a helper: a call of it with constant arguments is judged where it is called."""
        free = {n.id for n in ast.walk(gate._expression) if isinstance(n, ast.Name)}
        argument = {a for k, a in gate._bindings.values() if k == "package-argument"}
        if (free | argument) & set(parameters):
            gate._defaults, gate.helper = defaults(scope), True
            self.helpers[f"{self.module}.{scope_name}"] = (gate, parameters)
            self.helpers_here.add(scope_name)

    def constant(self, node: ast.expr):
        """A constant's value: a literal, or a name assigned a literal at module level here or in another
        module of the wheel (deep_ep's EXPECTED_CUDA_MAJOR); NOT_CONSTANT otherwise."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            here = self.module_assigned.get(node.id)
            if isinstance(here, ast.Constant):
                return here.value
            target = self.aliases.get(node.id)
            if ("constant", target) in self.shared:
                return self.shared[("constant", target)]
        return NOT_CONSTANT

    def helper_of(self, node: ast.Call) -> tuple[Gate, list[str]] | None:
        """The helper a call calls: imported, or defined in this module (called by its bare name)."""
        target = self.resolve(node.func)
        if isinstance(node.func, ast.Name) and node.func.id in self.helpers_here and node.func.id not in self.aliases:
            target = f"{self.module}.{node.func.id}"
        return self.helpers.get(target) or self.shared.get(("helper", target))

    def _gate(self, node, helper, local, scope_name) -> Gate | None:
        if helper is None:
            expression, bindings, aliases = self.substituted(node, local)
            if not bindings:
                return None
            constants = {}
        else:
            inner, parameters = helper
            constants = dict(inner._defaults)
            pairs = [
                *zip(parameters, node.args, strict=False),
                *((k.arg, k.value) for k in node.keywords if k.arg in parameters),
            ]
            for parameter, argument in pairs:
                value = self.constant(argument)
                if value is not NOT_CONSTANT:
                    constants[parameter] = value
            expression, bindings, aliases = inner._expression, inner._bindings, inner._aliases
        kinds = gate_kinds(bindings, constants)
        return Gate(
            file=self.file, line=node.lineno, function=scope_name, comparison=ast.unparse(node), kinds=kinds,
            effect="", bad_when=None, _expression=expression, _bindings=bindings, _aliases=aliases,
            _constants=constants,
        )  # fmt: skip

    def _terms(self, test: ast.BoolOp, this: ast.expr, want: bool, local) -> list:
        """The test's other terms as (expression, bindings, the value the raise needs); a term that reads no
        subject is kept as None: it cannot be judged here."""
        terms = []
        for term in test.values:
            if term is this:
                continue
            expression, bindings, aliases = self.substituted(term, local)  # one it cannot judge fails to evaluate
            terms.append((expression, bindings, want))
            self._aliases_seen.update(aliases)
        return terms

    def _guards(self, statement, parents, local) -> list:
        """The enclosing comparisons that must hold (or not) for this statement to run: (expression,
        bindings, value it must have) for each enclosing `if` whose test, or one of whose `and` terms, reads a
        subject."""
        guards = []
        child, parent = statement, parents.get(id(statement))
        while parent is not None:
            if isinstance(parent, ast.If) and child is not parent.test:
                in_body = any(child is s for s in parent.body)
                terms = (
                    parent.test.values
                    if isinstance(parent.test, ast.BoolOp) and isinstance(parent.test.op, ast.And) and in_body
                    else [parent.test]
                )
                for term in terms:
                    want, inner = in_body, term
                    if isinstance(term, ast.UnaryOp) and isinstance(term.op, ast.Not):
                        want, inner = not want, term.operand
                    if isinstance(inner, ast.Compare) and self._subjects(inner, local, set()):
                        expression, bindings, aliases = self.substituted(inner, local)
                        guards.append((expression, bindings, want))
                        self._aliases_seen.update(aliases)
            child, parent = parent, parents.get(id(parent))
        return guards


def gate_kinds(bindings: dict, constants: dict) -> list[str]:
    """The subjects a gate reads, as data: "package:flashinfer-python", "module:triton", "cudnn", ...; a package
    named by a name not resolved to a constant, by that name ("package:pkg": a helper's parameter)."""
    kinds = set()
    for kind, argument in bindings.values():
        if kind == "package-argument":
            argument = constants.get(argument, argument)
            kind = "package"
            if not isinstance(argument, str):
                kinds.add(f"package:{argument!r}")
                continue
        kinds.add(f"package:{normalise(argument)}" if kind == "package" else f"module:{argument}" if kind == "module"
                  else kind)  # fmt: skip
    return sorted(kinds)


def copy_gate(gate: Gate) -> Gate:
    return dataclasses.replace(gate, _constants=dict(gate._constants))


class _Reader(ModuleGates):
    """Subject recognition under another module's imports (a name that module exported)."""

    def __init__(self, aliases: dict[str, str]):  # noqa: D107 - no tree: only subject_of and resolve are used
        self.aliases = aliases


def wheel_gates(sources: list[tuple[str, str]]) -> list[Gate]:
    """Every gate of a wheel's Python sources, names shared between its modules followed."""
    return wheel_scan(sources)[0]


def wheel_scan(sources: list[tuple[str, str]]) -> tuple[list[Gate], list[dict]]:
    """(every gate of a wheel's Python sources, names shared between its modules followed; what the reader could
    not resolve: each gate reading a name that no constant binds, with its file, line and the names)."""
    modules = []
    shared: dict = {}
    for path, text in sources:
        if TESTS.search(path):
            continue  # a package's own tests: the server never imports them
        if not TRIGGER.search(text):  # no subject is read here: the cheap test keeps torch's 4,000 files quick
            for name, value in CONSTANT_LINE.findall(text):  # but its constants may be a helper's argument
                shared[("constant", f"{module_name(path)}.{name}")] = ast.literal_eval(value)
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes in old sources are not this reader's business
                module = ModuleGates(text, path, module_name(path))
        except (SyntaxError, ValueError, RecursionError):
            continue  # templates shipped as .py are not code the server runs
        modules.append(module)
        shared.update(module.exported)
        shared.update(module.constants)
    reexported(shared)
    # Two passes: the first finds the helpers (a function comparing a subject with its parameter), the second
    # judges their calls in every module.
    for module in modules:
        module.shared = shared
        try:
            list(module.gates())
        except RecursionError:
            continue
        shared.update({("helper", name): helper for name, helper in module.helpers.items()})
    reexported(shared)
    found, unresolved = [], []
    for module in modules:
        try:
            found.extend(module.gates())
        except RecursionError:
            unresolved.append({"file": module.file, "line": 0, "function": "<module>", "comparison": "",
                               "names": ["the module nests too deeply to read"]})  # fmt: skip
            continue
        unresolved.extend(module.unresolved)
    return found, unresolved


def reexported(shared: dict) -> None:
    """A package's __init__ re-exports its modules' names (`from .common import *` in sglang/srt/utils):
    make each name known under every enclosing package too."""
    for name, value in list(shared.items()):
        kind, dotted = name if isinstance(name, tuple) else (None, name)
        package, _, attribute = dotted.rpartition(".")
        while "." in package:
            package = package.rpartition(".")[0]
            shared.setdefault((kind, f"{package}.{attribute}") if kind else f"{package}.{attribute}", value)


def _scan_wheel(contents: Contents) -> dict:
    """A wheel's gates as records, its top-level modules, and what the reader could not resolve."""
    names = sorted(contents.names)
    sources = [(n, contents.text(n)) for n in names if n.endswith(".py")]
    modules = sorted(
        {n.split("/")[0].removesuffix(".py") for n in names if ".dist-info/" not in n and ".data/" not in n} - {""}
    )
    found, unresolved = wheel_scan(sources)
    return {"gates": [gate.record() for gate in found], "modules": modules, "unresolved": unresolved}


SCANNER = Scanner("startup-gates", ("sglang_eagle3_audits.gates", "sglang_eagle3_audits.gate_statements", __name__),
                  _scan_wheel)  # fmt: skip
