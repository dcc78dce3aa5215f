"""The one resolver of "module:attribute" names, and the peer frameworks' runners by plain import."""
import os.path

import pytest

from rlbench.core.by_name import resolve
from rlbench.engines import external


def test_a_name_resolves_to_its_object():
    assert resolve("os.path:join") is os.path.join
    assert resolve("rlbench.core.errors:UserError").__name__ == "UserError"


@pytest.mark.parametrize("bad", ["os.path", "os.path:", ":join", ""])
def test_a_string_that_is_not_an_import_path_is_refused(bad):
    with pytest.raises(ValueError, match="module:attribute"):
        resolve(bad)


def test_a_missing_attribute_fails_as_python_does():
    with pytest.raises(AttributeError):
        resolve("os.path:no_such_function")


def test_each_framework_has_its_runner():
    assert external.runner("mindspeed-rl").__name__ == "run_mindspeed"
    assert external.runner("verl").__name__ == "run_verl"
    with pytest.raises(KeyError, match="verl"):
        external.runner("openrlhf")
