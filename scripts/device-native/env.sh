# On the GPU machine: the carried tritium and Vulkan loader (target/devgpu, see bundle.sh).
# The carried libraries come first for these processes only (nothing is installed).
D=$PWD/target/devgpu
export LD_LIBRARY_PATH=$D/root/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VK_DRIVER_FILES=/usr/share/vulkan/icd.d/nvidia_icd.json
export PATH=$D:$PATH
