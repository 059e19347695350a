"""Forms of the example shop."""

from __future__ import annotations

from django import forms


class SignUpForm(forms.Form):
    email = forms.EmailField(label="E-mail", max_length=200)


class ReportForm(forms.Form):
    name = forms.CharField(label="Report name", max_length=200, initial="daily-sales")
