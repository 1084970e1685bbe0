from duo.cli import run

run()
