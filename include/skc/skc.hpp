// skc/skc.hpp: the umbrella header. Includes every public header except those under ext/.
#pragma once

#include "config.hpp"
#include "fwd.hpp"
#include "error.hpp"
#include "value.hpp"
#include "shape.hpp"
#include "dtype.hpp"
#include "op_record.hpp"
#include "op_desc.hpp"
#include "op_info_io.hpp"
#include "op_set.hpp"
#include "options.hpp"
#include "layout.hpp"
#include "select.hpp"
#include "recorder.hpp"
