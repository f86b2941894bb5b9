#!/usr/bin/env bash
# Keeps docs/ARCHITECTURE.md's glossary true: one meaning per name. Fails when a name in the first
# column of its tables is not defined where its second column says (a crate, and a module if one
# is given; several places separated by ";"), when a name has two rows (two meanings), and when
# a type name visible outside its file is defined in more than one file of the workspace's
# production code (visible there) without one glossary row naming it in two places or more: the same name for
# the same idea in different modules (`h2::Connection`, `h3::Connection`), as in rustls and
# quinn, is said so there.
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
declare -A meanings=() places=()
while IFS='|' read -r _ names where _; do
    IFS=';' read -ra homes <<<"$where"
    for name in $(grep -oE "$code" <<<"$names" | tr -d "$tick"); do
        rows=$((rows + 1))
        meanings[$name]=$((${meanings[$name]:-0} + 1))
        places[$name]=${#homes[@]}
        for home in "${homes[@]}"; do
            read -r krate rest <<<"$home"
            module=$(grep -oE "$code" <<<"$rest" | head -n 1 | tr -d "$tick" || true)
            dir=crates/$krate/src
            if [[ ! -d $dir ]]; then
                fail "glossary row for \`$name\` names no crate: '$home'"
                continue
            fi
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
    done
done < <(sed -n '/^## Glossary$/,/^## /p' docs/ARCHITECTURE.md | grep -E '^\| `')

for name in "${!meanings[@]}"; do
    if ((meanings[$name] > 1)); then
        fail "glossary name \`$name\` has ${meanings[$name]} rows: one meaning per name"
    fi
done

# A type name visible outside its file in more than one file: the same idea in several modules
# only if one glossary row says so by naming two places or more. File-private helpers (each
# state machine's `State`...) may repeat, beside each other and beside a visible one: no reader
# sees two at once.
shared=0
while read -r name files; do
    if ((${places[$name]:-0} > 1)); then
        shared=$((shared + 1))
    else
        fail "type \`$name\` is defined in more than one file ($files) and no glossary row names it in each module"
    fi
done < <(types | sort -u | awk '
    $3 == "pub" { n[$1]++; where[$1] = where[$1] " " $2 }
    END { for (k in n) if (n[k] > 1) print k where[k] }' | sort)

if ((rows == 0)); then
    fail "no glossary names found in docs/ARCHITECTURE.md"
fi
if ((failed)); then
    exit 1
fi
echo "check-glossary: $rows glossary names, each in one row and defined where it says; $shared names shared by modules for one idea"
