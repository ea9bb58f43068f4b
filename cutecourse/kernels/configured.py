"""A kernel's configuration is the arguments it was built with, and nothing else.

Two kernel objects compile to the same code exactly when they are of the same class and were
built with the same constructor arguments: M, N and K are run-time values, everything else
(tile, cluster, stages, scheduler, epilogue op ...) is fixed at compile time. So the compile
cache (``gemm_launch.compile_once``) keys on :meth:`Configured.key`, which reads the
arguments back from the constructor call itself: a new constructor option is part of the key
the moment it exists, with no tuple to keep up to date by hand.

**Defaults are class attributes.** A keyword whose default is None takes, when left None, the
class attribute of its name in capitals where the class has one (``tile_mn`` -> ``TILE_MN``). So a
variant changes a default by setting the attribute and keeps its parent's constructor; one with
a keyword of its own (stream-K's ``min_saved``) lists only that one and passes ``**options`` on.
The key holds the value used, whether it was spelled out or left to the class.

**Some keywords also take a name** (``NAMED``): a string given for ``scheduler`` is the entry of
that name in the class's table ``SCHEDULERS`` (each kernel family has its own: the dense
persistent kernels' ``tile_scheduler.SCHEDULERS``, stream-K's, the grouped kernels' in
``group_walk``), so a launcher, a compile target (JSON arguments) or a notebook names what a
subclass would pass as a class; a string given for ``l2_hints`` is the policy pair of that name in
``L2_HINT_PAIRS`` (``sm90``'s, in the cluster and persistent kernels alike). A name the class's
table lacks is refused, listing those it has; the key holds what the name stands for.

Both the key and the constructor see the filled value: :meth:`Configured.__init_subclass__`
wraps each class's ``__init__`` so that a keyword left None arrives as the class's attribute
(also through ``**options`` on its way to a parent). A capitalised attribute that names a keyword
whose default is *not* None would never be read (the signature's default wins), so such a class
is refused where it is defined: a default set on the class is used, or the class does not exist.
"""

from __future__ import annotations

import functools
import inspect


def _frozen(value):
    """``value`` as something hashable: lists become tuples, an epilogue op its own ``key()``."""
    if hasattr(value, "key") and callable(value.key) and not isinstance(value, type):
        return value.key()
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


#: Keywords that take a name as well as a value -> the class's table the name is looked up in
#: (``scheduler="dynamic"``: ``cls.SCHEDULERS["dynamic"]``). Not the keyword in capitals: that is
#: the keyword's default (``SCHEDULER``, ``L2_HINTS``).
NAMED = {"scheduler": "SCHEDULERS", "l2_hints": "L2_HINT_PAIRS"}


def filled(cls, arguments: dict) -> dict:
    """``arguments`` (keyword -> value) with each None replaced by ``cls``'s attribute of that
    keyword's name in capitals, where it has one: the one rule of class defaults; and a name given
    for a keyword of ``NAMED`` replaced by what it names (:func:`named`)."""
    out = {k: getattr(cls, k.upper(), None) if v is None else v for k, v in arguments.items()}
    return {k: named(cls, k, v) if k in NAMED and isinstance(v, str) else v for k, v in out.items()}


def named(cls, keyword: str, name: str):
    """The entry ``name`` of ``cls``'s table for ``keyword`` (``NAMED``: ``SCHEDULERS`` for
    ``scheduler=``); a name not in it is a ``CourseError`` listing the names the class takes."""
    from ..errors import CourseError

    table = getattr(cls, NAMED[keyword], {})
    if name not in table:
        default = getattr(cls, keyword.upper(), None)
        cls_form = f" or a class: {default.__name__} or a subclass of it" if isinstance(default, type) else ""
        raise CourseError(f"{keyword}={name!r} is not a name {cls.__name__} takes",
                          f"pass {keyword}= one of {', '.join(map(repr, table)) or '(none)'} "
                          f"({cls.__name__}.{NAMED[keyword]}){cls_form}")
    return table[name]


def _fill_defaults(init):
    """``init`` called with every keyword left None (its own, and those in its ``**options``)
    replaced by the instance's class attribute of that name in capitals, where there is one."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def with_class_defaults(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        own = list(bound.arguments)[1:]  # without self
        bound.arguments.update(filled(type(self), {k: bound.arguments[k] for k in own}))
        for name in own:
            if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                bound.arguments[name] = filled(type(self), bound.arguments[name])
        return init(*bound.args, **bound.kwargs)

    with_class_defaults.fills_defaults = True
    return with_class_defaults


def keywords(cls) -> inspect.Signature:
    """What ``cls(...)`` takes: its ``__init__``'s parameters, and where that passes ``**options``
    on to its parent's ``__init__``, the parent's too (up the classes until one takes no
    ``**options``)."""
    params, seen = [], set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        own = list(inspect.signature(klass.__init__).parameters.values())[1:]  # without self
        params += [p for p in own if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in seen]
        seen |= {p.name for p in own}
        if not any(p.kind is p.VAR_KEYWORD for p in own):
            break
    return inspect.Signature(params)


class _Signature:
    """``cls.__signature__``: every keyword the class takes (:func:`keywords`), for ``help(cls)``
    and ``inspect.signature(cls)``. Only on the class: an instance is a jit function's ``self``,
    whose own signature the DSL reads."""

    def __get__(self, obj, cls):
        if obj is not None:
            raise AttributeError("__signature__")
        return keywords(cls)


class Configured:
    """Base of the course's kernel classes: records the constructor arguments in ``arguments``
    before ``__init__`` runs, every default filled in (the signature's, or for a None, the
    class's: the module docstring). An unknown keyword fails here, naming the ones it takes."""

    __signature__ = _Signature()

    def __init_subclass__(cls, **kwargs):
        """Refuse, at class definition, a default the constructor would never read: an attribute
        ``X`` set on any class of ``cls`` for a keyword ``x`` whose default is not None."""
        super().__init_subclass__(**kwargs)
        init = vars(cls).get("__init__")
        if init is not None and not getattr(init, "fills_defaults", False):
            cls.__init__ = _fill_defaults(init)
        for name, param in keywords(cls).parameters.items():
            if param.default is None or param.default is param.empty:
                continue
            for klass in cls.__mro__:
                if name.upper() in vars(klass):
                    raise TypeError(
                        f"{cls.__name__}: {klass.__name__}.{name.upper()} would be ignored, because the "
                        f"keyword {name}= defaults to {param.default!r}, not None; give {name}= the "
                        f"default None (Configured fills it from {name.upper()}) or drop the attribute")

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        signature = keywords(cls)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{exc}; {cls.__name__} takes {', '.join(signature.parameters)}") from None
        bound.apply_defaults()
        self.arguments = filled(cls, bound.arguments)
        return self

    def key(self):
        """What the compiled code depends on: the class and its constructor arguments."""
        return (type(self), _frozen(self.arguments))


def pick(table: dict, keyword: str, value):
    """``table[value]``: the kernel class a build function's ``keyword`` names (``variant=`` in
    ``hopper_gemm.all_variants()`` and in ``grouped.FP8_KERNELS``), the one way an entry
    picks a class by an argument; another value is a ``CourseError`` listing the table's keys. A
    new class is reached by adding it to its table."""
    from ..errors import CourseError

    if value not in table:
        raise CourseError(f"{keyword}={value!r} names no kernel class here",
                          f"pass {keyword}= one of {', '.join(map(repr, table))}")
    return table[value]
