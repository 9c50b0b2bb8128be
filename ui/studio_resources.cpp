#include "studio_resources.h"

#include <QtGlobal>

static void initStudioQrc()
{
    Q_INIT_RESOURCE(studio);
}

namespace dlion::ui {

void initStudioResources()
{
    static const bool once = (initStudioQrc(), true);
    Q_UNUSED(once)
}

} // namespace dlion::ui
