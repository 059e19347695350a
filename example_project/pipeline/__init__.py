"""Spark jobs of the example project; they import django_eventmq.contrib.spark, never Django."""
