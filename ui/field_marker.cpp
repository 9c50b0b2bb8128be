#include "field_marker.h"

#include <QVariant>
#include <QWidget>

namespace dlion::ui {

namespace {

QColor tint(const QColor &base)
{
    const QColor red(208, 70, 59);
    const double k = 0.28;
    return QColor::fromRgbF(float(base.redF() * (1 - k) + red.redF() * k), float(base.greenF() * (1 - k) + red.greenF() * k),
                            float(base.blueF() * (1 - k) + red.blueF() * k));
}

} // namespace

void FieldMarker::mark(QWidget *field, const QString &message)
{
    if (!isMarked(field)) {
        field->setProperty("validTip", field->toolTip());
        field->setProperty("invalid", true);
        QPalette p = field->palette();
        for (QPalette::ColorRole role : {QPalette::Base, QPalette::Button, QPalette::AlternateBase})
            p.setColor(role, tint(p.color(role)));
        field->setPalette(p);
    }
    field->setToolTip(message);
}

void FieldMarker::clear(QWidget *field)
{
    if (!isMarked(field))
        return;
    field->setProperty("invalid", false);
    field->setPalette(QPalette());  // inherit again, following theme changes
    field->setToolTip(field->property("validTip").toString());
}

bool FieldMarker::isMarked(const QWidget *field)
{
    return field->property("invalid").toBool();
}

} // namespace dlion::ui
