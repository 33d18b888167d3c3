"""Lazy re-exports for the libraries' __init__ (PEP 562): each public name is imported from its module
on first use, so importing one light module (fuzzy.summaries for the store's readers, phases.tracker)
does not load what its siblings need (numba, scipy)."""

import importlib
import sys


def attach(package: str, exports: dict[str, str]):
    """(__getattr__, __dir__, __all__) for `package`, re-exporting each name of `exports` from the
    submodule it maps to; a name mapped to itself is that submodule (the import system binds a loaded
    submodule's name on the package anyway, so no other object can keep that name)."""

    def __getattr__(name: str) -> object:
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = importlib.import_module(f"{package}.{module}")
        if name != module:
            value = getattr(value, name)
        setattr(sys.modules[package], name, value)   # later look-ups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__, list(exports)
