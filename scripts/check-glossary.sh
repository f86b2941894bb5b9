#!/usr/bin/env bash
# Keeps docs/ARCHITECTURE.md's glossary true: fails when a name in the first column of its tables
# is not defined where its second column says (a crate, and a module if one is given), and when a
# type name visible outside its file is defined twice in the workspace's production code, since
# the glossary promises that each name means one thing.
set -euo pipefail
cd "$(dirname "$0")/.."

failed=0
fail() {
    echo "check-glossary: $*" >&2
    failed=1
}

# Production code: crates/*/src without its test-only files (tests.rs, sim_tests.rs...).
mapfile -t sources < <(find crates/*/src -name '*.rs' ! -name '*tests.rs' | sort)

# Type definitions, one "name file visibility" line each: every `pub`, `pub(crate)`,
# `pub(super)` or `pub(in ...)` one at any depth, and the private ones at a file's top level
# (indented private items are in test modules or function bodies; associated types in impls).
types() {
    grep -HE '^(\s*pub(\([a-z: ]+\))? +|)(struct|enum|trait|type|union) +[A-Za-z0-9_]+' "${sources[@]}" |
        sed -E 's/^([^:]+):(\s*(pub)(\([a-z: ]+\))? +|)(struct|enum|trait|type|union) +([A-Za-z0-9_]+).*/\6 \1 \3/' |
        awk '{ print $1, $2, ($3 == "pub" ? "pub" : "private") }'
}

# A name defined more than once where one of the definitions is visible outside its file.
# File-private helpers (each state machine's `State`...) may repeat: no reader sees two at once.
while read -r name files; do
    fail "type \`$name\` is defined more than once:$files"
done < <(types | sort -u | awk '
    { n[$1]++; where[$1] = where[$1] " " $2; if ($3 == "pub") shown[$1] = 1 }
    END { for (k in n) if (n[k] > 1 && shown[k]) print k where[k] }' | sort)

# Is `name` defined under `dir` (a crate's src) in `module` (a path such as h1::conn, or empty)?
defined() {
    local name=$1 dir=$2 module=$3 path
    local -a files
    if [[ -z $module ]]; then
        mapfile -t files < <(find "$dir" -name '*.rs' ! -name '*tests.rs')
    else
        path=$dir/${module//:://}
        mapfile -t files < <(find "$path.rs" "$path" -name '*.rs' ! -name '*tests.rs' 2>/dev/null)
    fi
    ((${#files[@]} > 0)) &&
        grep -qE "^\s*(pub(\([a-z: ]+\))? +)?(async +)?(struct|enum|trait|type|union|fn|mod|const|static) +$name\b" "${files[@]}"
}

# The glossary's rows: "| `Name`, `Other` | crate `module` | what it is |", from its heading to
# the next section.
tick=$'\x60'
code="${tick}[A-Za-z0-9_:]+${tick}"
rows=0
while IFS='|' read -r _ names where _; do
    read -r krate rest <<<"$where"
    module=$(grep -oE "$code" <<<"$rest" | head -n 1 | tr -d "$tick" || true)
    dir=crates/$krate/src
    if [[ ! -d $dir ]]; then
        fail "glossary row for$names names no crate: '$where'"
        continue
    fi
    for name in $(grep -oE "$code" <<<"$names" | tr -d "$tick"); do
        rows=$((rows + 1))
        # `h1::encode`, `linger::close`: the last segment is the item, the rest its module.
        item=${name##*::}
        scope=$module
        if [[ $name == *::* && -z $module ]]; then
            scope=${name%::*}
        fi
        if ! defined "$item" "$dir" "$scope"; then
            fail "glossary name \`$name\` is not defined in $dir${scope:+ (module $scope)}"
        fi
    done
done < <(sed -n '/^## Glossary$/,/^## /p' docs/ARCHITECTURE.md | grep -E '^\| `')

if ((rows == 0)); then
    fail "no glossary names found in docs/ARCHITECTURE.md"
fi
if ((failed)); then
    exit 1
fi
echo "check-glossary: $rows glossary names defined where the glossary says; no type name defined twice"
