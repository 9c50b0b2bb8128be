#pragma once

// (Same approach as ui/qcp.h; app/ does not depend on ui/.)
// QCustomPlot's header uses the bare Qt keywords (signals, slots, emit,
// foreach), which QT_NO_KEYWORDS (set publicly by dlion_protocol) removes.
// Map them to the Q_ macros for this header only.
#ifndef signals
#define signals Q_SIGNALS
#define DLION_QCP_DEFINED_SIGNALS
#endif
#ifndef slots
#define slots Q_SLOTS
#define DLION_QCP_DEFINED_SLOTS
#endif
#ifndef emit
#define emit Q_EMIT
#define DLION_QCP_DEFINED_EMIT
#endif
#ifndef foreach
#define foreach Q_FOREACH
#define DLION_QCP_DEFINED_FOREACH
#endif

#include <qcustomplot.h>

#ifdef DLION_QCP_DEFINED_SIGNALS
#undef signals
#undef DLION_QCP_DEFINED_SIGNALS
#endif
#ifdef DLION_QCP_DEFINED_SLOTS
#undef slots
#undef DLION_QCP_DEFINED_SLOTS
#endif
#ifdef DLION_QCP_DEFINED_EMIT
#undef emit
#undef DLION_QCP_DEFINED_EMIT
#endif
#ifdef DLION_QCP_DEFINED_FOREACH
#undef foreach
#undef DLION_QCP_DEFINED_FOREACH
#endif
