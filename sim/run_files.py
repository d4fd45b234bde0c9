"""The files of a run's folder (GUIDE section 3), named once.

``summary.json`` is written last, so its presence marks a finished run; a sweep job that failed
on a bad configuration leaves ``error.txt`` instead.
"""

CONFIG_FILE = "config.yaml"
REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
SUMMARY_FILE = "summary.json"
ERROR_FILE = "error.txt"
