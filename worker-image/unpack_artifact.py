"""Unpack a ferry artifact (gzip tar) into a folder, refusing anything that would land outside it.

    python unpack_artifact.py ARCHIVE DEST

Refuses absolute and '..' member names, then uses tarfile's 'data' extraction filter (Python 3.12, and 3.10.12+ / 3.11.4+): no absolute paths, no
'..', no links pointing out of DEST, no device files, no setuid bits, no owner from the archive.
Exit 0 on success, 1 on a bad archive, 2 on bad usage; the message names the offending member.
"""

import os
import sys
import tarfile


def unpack(archive, dest):
    if not hasattr(tarfile, "data_filter"):
        raise SystemExit("this Python has no tarfile data filter (need 3.10.12+, 3.11.4+ or 3.12+)")
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(archive, mode="r:gz") as tar:
        members = tar.getmembers()
        # Check every member before writing anything, so a bad archive leaves DEST untouched.
        for member in members:
            # The filter would quietly strip a leading '/'; ferry artifacts never have one, so an
            # archive that does is not ours: refuse it rather than guess.
            if member.name.startswith(("/", "\\")) or ".." in member.name.replace("\\", "/").split("/"):
                raise tarfile.FilterError(f"refusing member {member.name!r}: absolute or '..' path")
            tarfile.data_filter(member, dest)
        tar.extractall(dest, members=members, filter="data")
    return len(members)


def main(argv):
    if len(argv) != 2:
        print("usage: unpack_artifact.py ARCHIVE DEST", file=sys.stderr)
        return 2
    try:
        count = unpack(argv[0], argv[1])
    except (tarfile.TarError, OSError, EOFError) as exc:
        print(f"unpack_artifact: {argv[0]}: {exc}", file=sys.stderr)
        return 1
    print(f"unpack_artifact: {count} entries into {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
