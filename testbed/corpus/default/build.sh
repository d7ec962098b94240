#!/usr/bin/env bash
# Rebuilds testbed/corpus/default/{site,NOTICE} from pinned Debian and npm
# packages (see gen.go). Needs root for apt-get; installs the tools it lacks.
# The output is committed: nothing here runs at build or test time. gen.go
# imports package corpus (PaperSites), which embeds site/: restore a deleted
# site/ with git checkout before rebuilding.
set -euo pipefail
cd "$(dirname "$0")"
declare -A tools=([convert]=imagemagick [cjpeg]=libjpeg-turbo-progs [pngquant]=pngquant
	[gifsicle]=gifsicle [optipng]=optipng [rsvg-convert]=librsvg2-bin [npm]=npm)
missing=()
for t in "${!tools[@]}"; do
	# /usr/bin/convert: ImageMagick itself, not a stand-in elsewhere in PATH.
	if [[ $t == convert ]]; then [[ -x /usr/bin/convert ]] || missing+=("${tools[$t]}"); continue; fi
	command -v "$t" >/dev/null || missing+=("${tools[$t]}")
done
if ((${#missing[@]})); then
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
exec go run gen.go "$@"
