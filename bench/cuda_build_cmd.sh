# shellcheck shell=sh
# Sourced by bench/cuda_regs.sh and bench/cuda_sass.sh: how a configured CUDA build compiles its kernels.
# cuda_build_cmd NAME BUILD sets cmd to BUILD's Makefile's $(NVCC) $(GUILD_NVCCFLAGS) (its include paths relative to
# BUILD: nvcc runs there), or says why not, as program NAME, and exits 2.
cuda_build_cmd() {
    [ -f "$2/Makefile" ] || { echo "$1: no configured build at $2; give --build DIR" >&2; exit 2; }
    # shellcheck disable=SC2016 # $(NVCC): make expands it
    cmd=$(printf 'cuda_build_cmd:\n\t@echo $(NVCC) $(GUILD_NVCCFLAGS)\n' |
        MAKEFLAGS='' MAKELEVEL='' make -s --no-print-directory -C "$2" -f Makefile -f - cuda_build_cmd 2> /dev/null)
    case $cmd in
    "" | -*) echo "$1: the build at $2 has no nvcc (configure it --with-cuda)" >&2; exit 2 ;;
    esac
}
