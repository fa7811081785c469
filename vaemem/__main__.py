"""``python -m vaemem``: the console script, for an environment whose scripts folder is not on PATH."""

from vaemem.entry import main

if __name__ == "__main__":  # importing it (a check of every module) runs nothing
    main()
