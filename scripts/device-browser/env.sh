# On the GPU machine: the carried Chromium headless shell, node and tritium (target/devroot).
R=$PWD/target/devroot/root
export LD_LIBRARY_PATH=$R/lib PATH=$R/bin:$PATH CHROMIUM=$R/chromium/chromium-headless-shell
export TRITIUM_BIN=$R/tritium/tritium TRITIUM_PKG_DIR=${TRITIUM_PKG_DIR:-$R/tritium/pkg}
[ -e node_modules ] || ln -s "$R/node_modules" node_modules
