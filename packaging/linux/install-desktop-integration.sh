#!/usr/bin/env bash
# Registers Checkpoint Inspector with the desktop: menu entry, icon, AppStream metadata and the
# MIME types that make file managers open .pt / .pth / .ckpt / .safetensors with it.
# Usage: packaging/linux/install-desktop-integration.sh [DATA_DIR]
#   DATA_DIR defaults to ${XDG_DATA_HOME:-~/.local/share}; use /usr/local/share as root.
# `ckpt-inspector` must be on PATH (pip/pipx install, or a link to the PyInstaller build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
icons="$here/../../resources/icons"
data="${1:-${XDG_DATA_HOME:-$HOME/.local/share}}"
app=io.github.ckptinspector.CheckpointInspector

install -Dm644 "$here/$app.desktop" "$data/applications/$app.desktop"
install -Dm644 "$here/$app.metainfo.xml" "$data/metainfo/$app.metainfo.xml"
install -Dm644 "$here/$app.mime.xml" "$data/mime/packages/$app.xml"
for png in "$icons"/checkpoint-inspector-*.png; do
    size="${png##*-}"
    size="${size%.png}"
    install -Dm644 "$png" "$data/icons/hicolor/${size}x${size}/apps/$app.png"
done
install -Dm644 "$here/../../resources/checkpoint-inspector.svg" \
    "$data/icons/hicolor/scalable/apps/$app.svg"

# Refresh the caches that exist on this system; each is optional.
command -v update-mime-database >/dev/null && update-mime-database "$data/mime"
command -v update-desktop-database >/dev/null && update-desktop-database -q "$data/applications"
command -v gtk-update-icon-cache >/dev/null && \
    gtk-update-icon-cache -q -t -f "$data/icons/hicolor" || true
echo "installed desktop integration into $data"
