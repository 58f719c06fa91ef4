"""A forward's source -> its operations and a rewritten code object that routes each of them.

Pure Python, framework-free. Each call and binary operator of the forward's body (``x + y``,
``self.attn(h)``, ``torch.matmul(q, k)``, ``x += y`` on a name) becomes ``__hk_op__(i, f, *args,
**kwargs)`` (``f`` None for an operator: the dispatcher knows it by ``i``). Operations are numbered
in evaluation order (arguments before the call that takes them). The code is compiled once per code
object inside a shell function whose parameters are ``__hk_op__`` and the original's free variables,
so the rewritten function takes the original's closure cells (``super()``'s ``__class__``
included), globals, defaults and, compiled with the real file name and line numbers, shows the
original's lines in tracebacks. Calls that read the caller's frame (``super()``, ``locals()``...)
and nested functions and lambdas are left as written.
"""

from __future__ import annotations

import ast
import inspect
import operator
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from types import CellType, CodeType, FunctionType
from typing import Any

from hookkit.core.errors import HookkitError

OP = "__hk_op__"
_SHELL = "__hk_shell__"
# called bare, these read or need the calling frame: rewritten, they would see the dispatcher's
_FRAME_BOUND = frozenset({"super", "locals", "globals", "vars", "eval", "exec", "dir"})
# the same reached as attributes: sys._getframe(), inspect.currentframe()
_FRAME_ATTRS = frozenset({"_getframe", "currentframe"})

_BINOPS: dict[type, tuple[str, str, Callable]] = {
    ast.Add: ("add", "+", operator.add),
    ast.Sub: ("sub", "-", operator.sub),
    ast.Mult: ("mul", "*", operator.mul),
    ast.MatMult: ("matmul", "@", operator.matmul),
    ast.Div: ("truediv", "/", operator.truediv),
    ast.FloorDiv: ("floordiv", "//", operator.floordiv),
    ast.Mod: ("mod", "%", operator.mod),
    ast.Pow: ("pow", "**", operator.pow),
    ast.LShift: ("lshift", "<<", operator.lshift),
    ast.RShift: ("rshift", ">>", operator.rshift),
    ast.BitOr: ("or", "|", operator.or_),
    ast.BitXor: ("xor", "^", operator.xor),
    ast.BitAnd: ("and", "&", operator.and_),
}
_INPLACE: dict[type, Callable] = {
    ast.Add: operator.iadd,
    ast.Sub: operator.isub,
    ast.Mult: operator.imul,
    ast.MatMult: operator.imatmul,
    ast.Div: operator.itruediv,
    ast.FloorDiv: operator.ifloordiv,
    ast.Mod: operator.imod,
    ast.Pow: operator.ipow,
    ast.LShift: operator.ilshift,
    ast.RShift: operator.irshift,
    ast.BitOr: operator.ior,
    ast.BitXor: operator.ixor,
    ast.BitAnd: operator.iand,
}


class SourceUnavailable(HookkitError, TypeError):
    """A forward whose operations cannot be listed: no Python source, or a wrapper hookkit cannot rebuild."""


@dataclass(frozen=True)
class Site:
    """One operation as written: its name in the layer, line, what is called and how."""

    name: str
    lineno: int  # line in the source file
    line: str  # the text of that line, stripped
    call: str  # "self.attn", "torch.matmul", "+"
    kind: str  # "operator", "function", "method", or "self" (an attribute of the layer: submodule or method)
    fn: Callable | None  # the operator's function (None for a call: the callee is passed at run time)


@dataclass(frozen=True)
class Compiled:
    """What one code object rewrites to: its operations, the new code, the source shown."""

    sites: tuple[Site, ...]
    code: CodeType
    source: str  # the def's text, dedented
    first: int  # the file line of the source's first line


def _dotted(node: ast.expr) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every expression ast.parse makes
        return "<call>"


class _Rewriter(ast.NodeTransformer):
    """Rewrites a forward's body; collects one ``Site`` per operation, in evaluation order."""

    def __init__(self, self_name: str | None, local_names: set[str], lines: list[str], first: int):
        self.self_name, self.locals, self.lines, self.first = self_name, local_names, lines, first
        self.sites: list[Site] = []
        self.counts: dict[str, int] = {}

    def _add(self, base: str, node: ast.AST, call: str, kind: str, fn: Callable | None) -> int:
        k = self.counts.get(base, 0)
        self.counts[base] = k + 1
        lineno = getattr(node, "lineno", self.first)
        text = self.lines[lineno - self.first].strip() if 0 <= lineno - self.first < len(self.lines) else ""
        self.sites.append(Site(f"{base}_{k}", lineno, text, call, kind, fn))
        return len(self.sites) - 1

    def _op(self, index: int, fn: ast.expr, args: list, keywords: list, node: ast.AST) -> ast.Call:
        call = ast.Call(ast.Name(OP, ast.Load()), [ast.Constant(index), fn, *args], keywords)
        return ast.copy_location(call, node)

    # nested scopes are left as written: their operations run in another frame, maybe later
    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if (isinstance(func, ast.Name) and func.id in _FRAME_BOUND) or (isinstance(func, ast.Attribute) and func.attr in _FRAME_ATTRS):
            return node
        self.generic_visit(node)  # the callee and the arguments run first: numbered first
        func = node.func
        if isinstance(func, ast.Attribute):
            base, call = func.attr, _dotted(func)
            root = func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(func.value, ast.Name) and func.value.id == self.self_name:
                kind = "self"
            elif isinstance(root, ast.Name) and root.id not in self.locals:
                kind = "function"  # torch.matmul, F.gelu: reached from a global
            else:
                kind = "method"  # x.view(...): a method of a value
        elif isinstance(func, ast.Name):
            base, call, kind = func.id, func.id, "function"
        else:
            base, call, kind = "call", _dotted(func), "function"
        index = self._add(base, node, call, kind, None)
        return self._op(index, func, node.args, node.keywords, node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        base, symbol, fn = _BINOPS[type(node.op)]
        index = self._add(base, node, symbol, "operator", fn)
        return self._op(index, ast.Constant(None), [node.left, node.right], [], node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name):  # x.a += y, x[i] += y: the target would be evaluated twice
            return node
        base, symbol, _ = _BINOPS[type(node.op)]
        index = self._add(base, node, symbol + "=", "operator", _INPLACE[type(node.op)])
        value = self._op(index, ast.Constant(None), [ast.Name(node.target.id, ast.Load()), node.value], [], node)
        return ast.copy_location(ast.Assign([ast.Name(node.target.id, ast.Store())], value), node)


def _assigned(fn_node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names local to the function: its parameters and the names it assigns."""
    a = fn_node.args
    names = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    names.update(x.arg for x in (a.vararg, a.kwarg) if x is not None)
    for node in ast.walk(fn_node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _shift_columns(tree: ast.AST, indent: int) -> None:
    """The source was dedented by ``indent`` columns: put them back for tracebacks' carets."""
    if indent:
        for node in ast.walk(tree):
            if hasattr(node, "col_offset"):
                node.col_offset += indent
                end = getattr(node, "end_col_offset", None)
                if end is not None:
                    setattr(node, "end_col_offset", end + indent)  # noqa: B010


def compile_forward(code: CodeType) -> Compiled:
    """Rewrite the function ``code`` was compiled from (see the module docstring)."""
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError) as exc:
        raise SourceUnavailable(f"its source cannot be read ({exc})") from None
    raw = "".join(lines)
    source = textwrap.dedent(raw)
    indent = len(lines[0]) - len(lines[0].lstrip()) if source != raw else 0
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise SourceUnavailable(f"its source does not parse on its own ({exc.msg}, line {exc.lineno})") from None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != code.co_name:
        raise SourceUnavailable("it is not a function written with def (a lambda or a generated function)")
    node.decorator_list = []  # decorators are rebuilt around the result from the wrappers' cells
    ast.increment_lineno(tree, first - 1)
    _shift_columns(tree, indent)
    params = [*node.args.posonlyargs, *node.args.args]
    rewriter = _Rewriter(params[0].arg if params else None, _assigned(node), source.splitlines(), first)
    node.body = [rewriter.visit(stmt) for stmt in node.body]
    shell = ast.FunctionDef(
        name=_SHELL,
        args=ast.arguments(
            posonlyargs=[], args=[ast.arg(OP), *[ast.arg(n) for n in code.co_freevars]], kwonlyargs=[], kw_defaults=[], defaults=[]
        ),
        body=[node, ast.Return(ast.Name(node.name, ast.Load()))],
        decorator_list=[],
        returns=None,
        type_comment=None,
    )
    ast.copy_location(shell, node)
    module = ast.Module([shell], [])
    ast.fix_missing_locations(module)
    compiled = compile(module, code.co_filename, "exec", dont_inherit=True)
    shell_code = next(c for c in compiled.co_consts if isinstance(c, CodeType) and c.co_name == _SHELL)
    new = next(c for c in shell_code.co_consts if isinstance(c, CodeType) and c.co_name == code.co_name)
    return Compiled(tuple(rewriter.sites), new, source, first)


_cache: dict[CodeType, Compiled | SourceUnavailable] = {}


def compiled_for(code: CodeType) -> Compiled:
    """``compile_forward(code)``, once per code object (a failure is remembered too)."""
    got = _cache.get(code)
    if got is None:
        try:
            got = compile_forward(code)
        except SourceUnavailable as exc:
            got = exc
        if len(_cache) > 4096:  # classes made in a loop: bounded
            _cache.clear()
        _cache[code] = got
    if isinstance(got, SourceUnavailable):
        raise SourceUnavailable(str(got))
    return got


def unwrap(forward: Any) -> tuple[FunctionType, list[tuple[FunctionType, int]]]:
    """The function under ``forward``'s decorators, and the ``(wrapper, cell index)`` chain,
    outermost first, that ``rewrap`` rebuilds around a replacement. A wrapper is followed through
    its ``__wrapped__`` when one of its closure cells holds that function (functools.wraps)."""
    fn = getattr(forward, "__func__", forward)
    if not isinstance(fn, FunctionType):
        what = "a built-in or C++ function" if callable(fn) else type(fn).__name__
        raise SourceUnavailable(f"its forward is {what} ({type(fn).__name__}), with no Python source")
    chain: list[tuple[FunctionType, int]] = []
    while True:
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            return fn, chain
        cells = fn.__closure__ or ()
        index = next((i for i, c in enumerate(cells) if _cell_holds(c, inner)), None)
        if index is None or not isinstance(inner, FunctionType) or len(chain) > 16:
            raise SourceUnavailable(
                f"its forward is wrapped by {fn.__qualname__}, which does not hold the function it wraps in a closure cell"
            )
        chain.append((fn, index))
        fn = inner


def _cell_holds(cell: Any, value: Any) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


def like(fn: FunctionType, code: CodeType, closure: tuple | None) -> FunctionType:
    """A function as ``fn`` (globals, name, defaults, keyword-only defaults, attributes) with
    ``code`` and ``closure``."""
    new = FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__dict__.update(fn.__dict__)
    return new


def build(inner: FunctionType, chain: list[tuple[FunctionType, int]], compiled: Compiled, dispatch: Callable) -> FunctionType:
    """The rewritten forward with its decorators rebuilt around it, calling ``dispatch`` per
    operation. Fresh wrappers: the class's own are shared by every instance and stay untouched."""
    cells = dict(zip(inner.__code__.co_freevars, inner.__closure__ or ()))
    cells[OP] = CellType(dispatch)
    built = like(inner, compiled.code, tuple(cells[n] for n in compiled.code.co_freevars) or None)
    for wrapper, index in reversed(chain):
        closure = list(wrapper.__closure__ or ())
        closure[index] = CellType(built)
        outer = like(wrapper, wrapper.__code__, tuple(closure))
        outer.__wrapped__ = built  # type: ignore[attr-defined]
        built = outer
    return built
