#!/bin/sh
# Prints the package version, for `make package`:
#   - the first line of VERSION at the top of the tree, if that file exists
#     (a release tarball);
#   - else from `git describe` of the last tag vX.Y.Z: "v1.2.3" gives
#     1.2.3, "v1.2.3-4-gabc1234" (4 commits later) gives 1.2.3+4.gabc1234,
#     "v1.2.3-rc1" gives 1.2.3~rc1 (sorts before 1.2.3 in dpkg and rpm);
#   - else, with no tag yet, 0.0.0+N.gHASH, N being the number of commits.
# A tree with uncommitted changes to tracked files adds "dirty": 1.2.3+dirty,
# 1.2.3+4.gabc1234.dirty. Every form sorts above the one of the commit before.
set -eu
cd "$(dirname "$0")/.."

if [ -f VERSION ]; then
	head -n 1 VERSION
	exit 0
fi
if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "packaging/version.sh: no VERSION file and no git checkout: write the version into VERSION" >&2
	exit 1
fi
if desc=$(git describe --tags --match 'v[0-9]*' 2>/dev/null); then
	v=$(printf '%s\n' "$desc" | sed -E 's/^v//; s/-([0-9]+)-g([0-9a-f]+)$/+\1.g\2/; s/-/~/g')
else
	v=0.0.0+$(git rev-list --count HEAD).g$(git rev-parse --short=7 HEAD)
fi
if ! git diff --quiet HEAD -- 2>/dev/null; then
	case $v in
	*+*) v=$v.dirty ;;
	*) v=$v+dirty ;;
	esac
fi
printf '%s\n' "$v"
