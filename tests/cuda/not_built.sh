#!/bin/sh
# Stands in for the CUDA tests when configure found no nvcc: a visible SKIP rather than nothing.
echo "SKIP: the CUDA backend is not built (configure found no nvcc; see --with-cuda)"
exit 77
