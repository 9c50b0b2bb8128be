#include "field_marker.h"

#include <QStyle>
#include <QVariant>
#include <QWidget>

namespace dlion::ui {

namespace {

void setInvalid(QWidget *field, bool invalid)
{
    if (field->property("invalid").toBool() == invalid)
        return;
    field->setProperty("invalid", invalid);
    field->style()->unpolish(field);
    field->style()->polish(field);
    field->update();
}

} // namespace

void FieldMarker::mark(QWidget *field, const QString &message)
{
    if (!field->property("invalid").toBool())
        field->setProperty("validTip", field->toolTip());
    setInvalid(field, true);
    field->setToolTip(message);
}

void FieldMarker::clear(QWidget *field)
{
    if (!field->property("invalid").toBool())
        return;
    field->setToolTip(field->property("validTip").toString());
    setInvalid(field, false);
}

bool FieldMarker::isMarked(const QWidget *field)
{
    return field->property("invalid").toBool();
}

QString FieldMarker::styleSheet()
{
    return QStringLiteral("*[invalid=\"true\"] { border: 2px solid #d0463b; border-radius: 3px; }");
}

} // namespace dlion::ui
