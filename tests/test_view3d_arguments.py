"""``view=`` is checked in the trainer: its values, that it needs ``http=``, and the extra."""
import pathlib
import subprocess
import sys
import textwrap

import pytest

from async_plotter import Plotter
from async_plotter.errors import InvalidArgumentError
from tests.policies import LinearPolicy


@pytest.mark.parametrize("view,http,match", [
    ("4d", 0, "view"),
    (3, 0, "view"),
    ("3d", None, "pass http= too"),
])
def test_a_wrong_view_is_an_error_at_plotter(view, http, match):
    with pytest.raises(InvalidArgumentError, match=match):
        Plotter("HalfCheetah-v5", LinearPolicy(17, 6), view=view, http=http)


def test_without_the_extra_view_3d_names_the_install_and_2d_still_works():
    script = textwrap.dedent("""
        import sys
        sys.modules["mjviser"] = None  # as if the extra were not installed
        from async_plotter import Plotter
        from async_plotter.errors import InvalidArgumentError
        from tests.policies import LinearPolicy
        try:
            Plotter("HalfCheetah-v5", LinearPolicy(17, 6), http=0, view="3d")
        except InvalidArgumentError as error:
            print("REFUSED", error)
        Plotter("HalfCheetah-v5", LinearPolicy(17, 6), http=0, view="2d").close()
        print("2D OK")
    """)
    result = subprocess.run([sys.executable, "-c", script],
                            capture_output=True,
                            text=True,
                            timeout=120,
                            cwd=str(pathlib.Path(__file__).parent.parent))
    assert "REFUSED view='3d' needs mjviser" in result.stdout, result.stderr
    assert "pip install -e .[view3d]" in result.stdout
    assert "2D OK" in result.stdout, result.stderr
