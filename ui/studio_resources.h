#pragma once

namespace dlion::ui {

// Registers the icons of resources/studio.qrc. They live in the static
// dlion_ui library, whose resource initializer a linker would otherwise drop.
void initStudioResources();

} // namespace dlion::ui
