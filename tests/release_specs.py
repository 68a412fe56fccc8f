"""Release specs shared by the release tests (format with ``tmp=<folder>``)."""

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
