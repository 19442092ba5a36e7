// cuemu's stand-in for <cuda_runtime_api.h> (see cuemu.h)
#pragma once
#include "cuemu.h"
