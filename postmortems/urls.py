from django.urls import include, path

from postmortems import views

app_name = "postmortems"
postmortem_urls = [
    path("", views.postmortem, name="detail"),
    path("edit/", views.edit_narrative, name="edit"),
    path("review/", views.request_review, name="request_review"),
    path("publish/", views.publish, name="publish"),
    path("actions/", views.add_action_item, name="add_action"),
    path("actions/<uuid:item_id>/close/", views.close_action_item, name="close_action"),
    path("exports/", views.exports, name="exports"),
    path("exports/new/", views.request_export, name="export"),
    path("exports/<uuid:export_id>/download/", views.download, name="download"),
]
urlpatterns = [
    path("investigations/<uuid:investigation_id>/postmortem/", include(postmortem_urls)),
]
