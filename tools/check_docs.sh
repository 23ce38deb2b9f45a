#!/usr/bin/env bash
# The documentation checks CI runs: every public header opens with a /// \file brief, every file
# a document cites exists, docs/environment.md lists the library's environment variables, and the
# API reference (doxygen docs/Doxyfile, Debian's doxygen) builds with no warnings.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
status=0
for h in $(find include strategies kernels -name '*.hpp' | sort); do
  { head -1 "$h" | grep -qx '/// \\file' && sed -n 2p "$h" | grep -q '^/// [^ ]'; } ||
    { echo "docs: $h does not open with '/// \\file' and a '/// ' brief"; status=1; }
done
# No document cites a file the repository does not have (paths from the repository's root).
while IFS=: read -r doc line path; do
  [[ -e $path ]] || { echo "docs: $doc:$line cites $path, which is not in the repository"; status=1; }
done < <(git ls-files '*.md' | xargs grep -HnoP \
           '(?<![A-Za-z0-9_/.-])(include|strategies|kernels|tests|examples|bench|tools|docs)/[A-Za-z0-9_./-]+\.(hpp|cuh|cpp|cu|py|sh|md)')
# docs/environment.md lists exactly the variables of the library's one table of them, and no
# other library header reads a STRATA_ variable itself.
table=$(grep -oP 'Variable\{"\KSTRATA_[A-Z0-9_]+' include/strata/support/environment.hpp | sort)
listed=$(grep -oP '^\| `\KSTRATA_[A-Z0-9_]+' docs/environment.md | sort)
[[ -n $table && $table == "$listed" ]] ||
  { echo "docs: docs/environment.md and include/strata/support/environment.hpp list different variables:";
    diff <(echo "$table") <(echo "$listed"); status=1; }
for h in $(grep -rlE 'getenv\("STRATA_' include strategies kernels | grep -v '^include/strata/support/environment.hpp$'); do
  echo "docs: $h reads a STRATA_ variable itself: read it through strata::environment (support/environment.hpp)"; status=1
done
mkdir -p build/docs
doxygen docs/Doxyfile || { echo "docs: doxygen failed"; exit 1; }
if [[ -s build/docs/doxygen-warnings.log ]]; then
  echo "docs: doxygen warnings:"; cat build/docs/doxygen-warnings.log; status=1
fi
pages=$(find build/docs/api/html -name '*.html' | wc -l)
((pages > 100)) || { echo "docs: only $pages pages generated"; status=1; }
((status == 0)) && echo "docs: $(find include strategies kernels -name '*.hpp' | wc -l) headers with briefs; API reference in build/docs/api/html ($pages pages), no warnings"
exit $status
