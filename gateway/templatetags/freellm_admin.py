"""Template tags of the operator console.

`bounded_date_hierarchy` stands in for Django's `date_hierarchy` on change lists of unbounded
tables (the request log): same markup and overridable template, links computed by
gateway/admin_paging.py from two index probes instead of a DISTINCT over every row.
"""

from __future__ import annotations

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode
from django.template.base import Parser, Token

from gateway.admin_paging import bounded_date_hierarchy

register = template.Library()


@register.tag(name="bounded_date_hierarchy")
def bounded_date_hierarchy_tag(parser: Parser, token: Token) -> InclusionAdminNode:
    return InclusionAdminNode(
        parser, token, func=bounded_date_hierarchy, template_name="date_hierarchy.html", takes_context=False
    )
