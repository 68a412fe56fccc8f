"""Release specs shared by the release tests (format with ``tmp=<folder>``)."""

import os
from pathlib import Path

SMALL_SPEC = """
[release]
id = "small-1"
noise_partitions = 3

[population]
name = "small-people"
cap = {{ epsilon = 8, delta = 1e-8 }}

[privacy_unit]
column = "person_id"

[budget]
epsilon = 2
delta = 1e-9

[input]
synthetic_persons = 3000

[output]
dir = "{tmp}/out"

[run]
engine = "pandas"
master = "local[1]"
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"

[domains]
state = {{ start = 1, stop = 51 }}
sex = ["F", "M"]
age = {{ start = 0, stop = 115 }}
tenure = ["owned", "rented", "group_quarters"]

[[tables]]
name = "state_sex_age"
keys = ["state", "sex", "age"]
share = "1/2"

[[tables]]
name = "tenure"
keys = ["tenure"]
share = "1/4"

[[tables]]
name = "state_income"
keys = ["state"]
statistic = "sum"
value = "income"
lower = 0
upper = 200000
share = "1/4"
"""


def operator_home(folder) -> None:
    """Make ``folder`` the operator's dp_pipeline home for the rest of the test, and the
    operator a user of their own (``$HOME`` inside it).

    The operator decides the ledger and the key (a spec's ``run.ledger`` and
    ``run.key_file`` must name the operator's), so a test running a spec formatted
    with ``tmp=folder`` is an operator whose home is ``folder``. Two operators of one
    test are two users: a key bound to one ledger is refused with another in every home
    its user's runs know of (dp_pipeline.release.key_binding). Both variables are
    restored after the test by the conftest's monkeypatch of them; module fixtures
    set them through a ``pytest.MonkeyPatch`` of their own instead.
    """
    os.environ["DP_PIPELINE_HOME"] = str(folder)
    os.environ["HOME"] = str(Path(folder) / "user")


def operator_paths(folder) -> dict[str, str]:
    """``load_spec``'s operator arguments naming the ledger and key a spec formatted with
    ``tmp=folder`` names (the operator's ``--ledger`` and ``--key-file``)."""
    return {"ledger": f"{folder}/ledger.sqlite", "key_file": f"{folder}/master.key"}
