"""Loads a script of examples/ as a module, so tests can call its functions and main()."""

import importlib.util
import os

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def load_example(filename: str):
    spec = importlib.util.spec_from_file_location(filename.removesuffix(".py"),
                                                  os.path.join(EXAMPLES, filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
