// cuemu's stand-in for <cuda_runtime.h> (see cuemu.h)
#pragma once
#include "cuemu.h"
