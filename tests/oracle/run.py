"""Runs the oracle tests: every test_* function of every tests/oracle/test_*.py.
Usage: python3 tests/oracle/run.py BUILD_DIR [substring]
The last line is "N passed, N failed"."""
import importlib
import os
import sys
import traceback

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    filt = sys.argv[2] if len(sys.argv) > 2 else None
    try:
        import numpy  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as e:
        print(f"skip: the oracle tests need numpy and gguf ({e}); run scripts/setup-python.sh")
        print("0 passed, 0 failed")
        return 0
    import kvqlib
    kvqlib.load(build)
    passed = failed = 0
    for fname in sorted(os.listdir(here)):
        if not (fname.startswith("test_") and fname.endswith(".py")):
            continue
        mod = importlib.import_module(fname[:-3])
        for name in sorted(n for n in dir(mod) if n.startswith("test_")):
            full = f"{fname[:-3]}.{name}"
            if filt and filt not in full:
                continue
            try:
                getattr(mod, name)()
                print(f"ok   {full}")
                passed += 1
            except Exception:
                print(f"FAIL {full}")
                traceback.print_exc(file=sys.stdout)
                failed += 1
            sys.stdout.flush()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
