"""Application file for spark-submit (Airflow's SparkSubmitOperator): runs the stage CLI.

spark-submit executes a file, not a module, so this file only imports the package by its absolute
name and hands over the arguments.
"""

import sys

from outoforder.stages.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
